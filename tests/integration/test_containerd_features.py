"""What containerd 2.x adds, used when the daemon has it, on a real daemon of any version.

Each test asserts what ctrexec does from the daemon's own answers, never from its
version string: the session's containerd is the host's (1.6) or the one that
CTREXEC_CONTAINERD_BIN names (1.7, 2.1), and every test passes on each.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator

import pytest
from _cli import Cli
from google.protobuf import empty_pb2

from ctrexec import _rpc, errors
from ctrexec._api.containerd.services.introspection.v1 import introspection_pb2
from ctrexec.containerd import images
from ctrexec.containerd.client import RUNC_V2, Client

pytestmark = pytest.mark.integration

RECORD = "docker.io/library/ctrexec-delete-target:v1"


def _plugin_info_is_unimplemented(client: Client) -> bool:
    """The daemon's own answer to an empty PluginInfo: Unimplemented (1.x), or any
    other answer or error (the method exists)."""
    try:
        client._connection.unary(
            _rpc.INTROSPECTION,
            "PluginInfo",
            introspection_pb2.PluginInfoRequest(type="io.containerd.runtime.v2", id="task"),
            introspection_pb2.PluginInfoResponse,
        )
    except errors.Unimplemented:
        return True
    except errors.CtrexecError:
        return False
    return False


def _runc_version() -> str:
    """``runc --version``'s version, of the runc on this PATH (the daemon's: the host's)."""
    runc = shutil.which("runc")
    assert runc is not None, "integration tests need runc"
    out = subprocess.run([runc, "--version"], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()[0].split()[-1]


def test_runc_as_the_daemon_reports_it_or_this_path(client: Client, cli: Cli) -> None:
    features = client.runtime_features(RUNC_V2)
    info = client.info()
    shown = cli("info", check=True).stdout
    print(shown)
    if features is None:
        # only a daemon without the method is "cannot say": no error is swallowed
        assert _plugin_info_is_unimplemented(client)
        assert info.runc is None and not info.runc_error
        assert "runc v2:" not in shown
        assert (RUNC_V2 in info.runtimes) == bool(shutil.which("containerd-shim-runc-v2"))
        return
    assert not _plugin_info_is_unimplemented(client)
    assert features.runtime == RUNC_V2 and features.binary == "runc"
    # the features are runc's own: its version, and the namespaces ctrexec relies on
    assert features.binary_version == _runc_version()
    assert features.oci_versions.startswith("1.")
    assert "network" in features.features["linux"]["namespaces"]
    assert info.runc == features and RUNC_V2 in info.runtimes
    assert info.oci_runtimes[0] == "runc"
    assert f"runc v2:       runc {features.binary_version} (OCI {features.oci_versions})" in shown


def test_deprecations_shown_by_info_and_doctor(client: Client, cli: Cli) -> None:
    raw = client._connection.unary(
        _rpc.INTROSPECTION, "Server", empty_pb2.Empty(), introspection_pb2.ServerResponse
    )
    reported = sorted(w.id for w in raw.deprecations)
    assert sorted(d.id for d in client.server().deprecations) == reported
    info = json.loads(cli("info", "--json", check=True).stdout)
    assert sorted(d["id"] for d in info["deprecations"]) == reported
    doctor = cli("doctor", "--json")  # exit 1: it found something (any kind)
    assert doctor.returncode in (0, 1), doctor.stderr
    found = json.loads(doctor.stdout)
    assert sorted(f["Where"] for f in found if f["Kind"] == "deprecation") == reported
    # a daemon that reports 2.x's pid in Server is the one answering this call
    if raw.pid:
        assert client.server().pid == raw.pid


@pytest.fixture
def record(client: Client, test_image: str) -> Iterator[images.Image]:
    """RECORD -> the test image's target, removed again after the test."""
    image = images.get_image(client, test_image)
    with client.lease() as lease:
        images.record_image(client, RECORD, image.target, lease=lease.id)
    try:
        yield image
    finally:
        if images.recorded_target(client, RECORD) is not None:
            images.remove_image(client, RECORD)


def test_a_delete_names_its_target(client: Client, record: images.Image) -> None:
    """A stale target: 2.x keeps the record and ctrexec says why in one line; a daemon
    without the field ignores it (proto3 skips unknown fields) and deletes."""
    stale = record.config_descriptor.digest  # a real digest, not the record's target
    try:
        images.remove_image(client, RECORD, target=stale)
    except errors.Conflict as exc:
        message = str(exc)
        assert "\n" not in message and RECORD in message and record.digest in message
        assert images.recorded_target(client, RECORD) == record.digest  # kept as it was
        outcome = "refused"
    else:
        assert images.recorded_target(client, RECORD) is None  # the field was ignored
        outcome = "ignored"
    print(f"containerd {client.version().version}: a stale Delete target was {outcome}")
    if outcome == "refused":
        images.remove_image(client, RECORD, target=record.digest)  # the right one goes
        assert images.recorded_target(client, RECORD) is None


def test_rmi_removes_the_target_it_resolved(cli: Cli, client: Client, record: images.Image) -> None:
    out = cli("rmi", RECORD)
    assert out.returncode == 0, out.stderr
    assert images.recorded_target(client, RECORD) is None
    gone = cli("rmi", RECORD)
    assert gone.returncode != 0 and "not found" in gone.stderr
