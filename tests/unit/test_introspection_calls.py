"""containerd 2.x's introspection additions, as the client reads them: PluginInfo about
a runtime (None where the daemon lacks the call), Server's deprecations (none on 1.x),
and doctor's findings of them. The connection is a stand-in; the daemon's side is
tests/integration/test_containerd_features.py."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from google.protobuf import any_pb2, timestamp_pb2

from ctrexec import _rpc, errors
from ctrexec._api.containerd.services.introspection.v1 import introspection_pb2 as ip
from ctrexec._api.containerd.types import introspection_pb2 as tip
from ctrexec._api.runc.options import oci_pb2
from ctrexec.containerd import client as cl
from ctrexec.doctor import daemon
from ctrexec.doctor.findings import Scope

pytestmark = pytest.mark.unit

FEATURES = {
    "ociVersionMin": "1.0.0",
    "ociVersionMax": "1.0.2-dev",
    "annotations": {"org.opencontainers.runc.version": "1.1.5+ds1"},
}


class _Conn:
    """Answers each method with the message (or error) it was given."""

    def __init__(self, **answers: Any) -> None:
        self.answers = answers
        self.requests: dict[str, Any] = {}

    def unary(self, service: str, method: str, request: Any, rt: Any, **kw: Any) -> Any:
        self.requests[method] = request
        answer = self.answers[method]
        if isinstance(answer, errors.CtrexecError):
            raise answer
        return answer


def _client(conn: _Conn) -> cl.Client:
    return cl.Client(cast(_rpc.Connection, conn), namespace="ns")


def _runtime_answer(options: any_pb2.Any | None = None) -> ip.PluginInfoResponse:
    info = tip.RuntimeInfo(name="io.containerd.runc.v2")
    info.version.version = "2.1.9"
    info.features.type_url = cl.FEATURES_TYPE_URL
    info.features.value = json.dumps(FEATURES).encode()
    if options is not None:
        info.options.CopyFrom(options)
    # containerd writes the bare message name as the type URL (no "/")
    extra = any_pb2.Any(type_url="containerd.types.RuntimeInfo", value=info.SerializeToString())
    return ip.PluginInfoResponse(extra=extra)


def test_a_daemon_without_plugin_info_says_nothing() -> None:
    conn = _Conn(PluginInfo=errors.Unimplemented("unknown method PluginInfo"))
    assert _client(conn).runtime_features() is None


def test_runc_features_as_the_daemon_reports_them() -> None:
    conn = _Conn(PluginInfo=_runtime_answer())
    got = _client(conn).runtime_features()
    assert got == cl.RuntimeFeatures(
        runtime="io.containerd.runc.v2", binary="runc", shim_version="2.1.9", features=FEATURES
    )
    assert (got.binary_version, got.oci_versions) == ("1.1.5+ds1", "1.0.0..1.0.2-dev")
    req = conn.requests["PluginInfo"]
    assert (req.type, req.id) == cl.TASK_RUNTIME_PLUGIN
    asked = tip.RuntimeRequest()
    assert req.options.Unpack(asked) and asked.runtime_path == "io.containerd.runc.v2"
    assert not asked.HasField("options")


def test_another_binary_is_asked_for_and_named() -> None:
    opts = oci_pb2.Options(binary_name="crun").SerializeToString()
    echoed = any_pb2.Any(type_url="containerd.runc.v1.Options", value=opts)
    conn = _Conn(PluginInfo=_runtime_answer(echoed))
    got = _client(conn).runtime_features(binary="crun")
    assert got is not None and got.binary == "crun"
    asked = tip.RuntimeRequest()
    conn.requests["PluginInfo"].options.Unpack(asked)
    assert oci_pb2.Options.FromString(asked.options.value).binary_name == "crun"


def test_an_answer_of_another_type_is_an_error() -> None:
    conn = _Conn(PluginInfo=ip.PluginInfoResponse(extra=any_pb2.Any(type_url="x.Other")))
    with pytest.raises(errors.Internal):
        _client(conn).runtime_features()


def _server_answer() -> ip.ServerResponse:
    seen = timestamp_pb2.Timestamp(seconds=1_700_000_000)
    warning = ip.DeprecationWarning(
        id="io.containerd.deprecation/tracing-processor-config",
        message="The tracing processor config is deprecated",
        last_occurrence=seen,
    )
    return ip.ServerResponse(uuid="u", pid=42, deprecations=[warning])


def test_server_deprecations_and_none_from_1x() -> None:
    got = _client(_Conn(Server=_server_answer())).server()
    assert got.pid == 42
    (dep,) = got.deprecations
    assert dep.id.endswith("tracing-processor-config")
    assert dep.last_seen is not None and dep.last_seen.year == 2023
    assert _client(_Conn(Server=ip.ServerResponse(uuid="u"))).server() == cl.ServerDetails("u")


def test_doctor_reports_each_deprecation_as_a_warning() -> None:
    scope = Scope(client=_client(_Conn(Server=_server_answer())))
    (finding,) = daemon.find(scope)
    assert finding.kind == "deprecation" and not finding.garbage
    assert finding.where == "io.containerd.deprecation/tracing-processor-config"
    assert "tracing processor config is deprecated" in finding.what
    assert daemon.find(Scope(client=_client(_Conn(Server=ip.ServerResponse())))) == []
