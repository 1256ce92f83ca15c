"""Wire conformance of ctrexec's own protos/ against containerd's upstream protos.

ctrexec writes its own .proto text for containerd's API v1 (see protos/). That
text must stay wire-identical to containerd's: same full names (gRPC method
paths and Any type URLs depend on them), same field numbers, types, labels and
oneofs, same enum numbers, same RPC shapes. Both sides are compiled with
grpc_tools.protoc into FileDescriptorSets and compared element by element.

The upstream sources are the Debian golang packages under /usr/share/gocode. If
they are absent the comparison is skipped, unless CI=true, where it fails.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
from _wirecmp import (
    OUR_PREFIX,
    OUR_PROTOS,
    SERVICES,
    build_index,
    compare,
    compare_files,
    compile_set,
    fail_on,
    our_proto_files,
    unexplained,
    walk_messages,
)
from google.protobuf import descriptor_pb2 as d

pytestmark = pytest.mark.unit

GOCODE = Path("/usr/share/gocode/src")
UPSTREAM_INCLUDES = (
    GOCODE,
    GOCODE / "github.com/gogo/protobuf",
    GOCODE / "github.com/gogo/protobuf/protobuf",
    GOCODE / "github.com/gogo/googleapis",
)
_CTRD = "github.com/containerd/containerd/api/"

# Our file (relative to protos/) -> the upstream file it mirrors (relative to GOCODE
# or to the gogo googleapis root). Every file under protos/ must be listed here.
# None: a file of containerd 2.x's API that 1.6 has no counterpart of (compared by
# test_wire_conformance_2x.py; its elements are in KNOWN_ABSENT_IN_16).
FILE_MAP: dict[str, str | None] = {
    **{
        f"ctrexec/_api/containerd/types/{n}.proto": f"{_CTRD}types/{n}.proto"
        for n in ("descriptor", "metrics", "mount", "platform")
    },
    "ctrexec/_api/containerd/types/task/task.proto": f"{_CTRD}types/task/task.proto",
    "ctrexec/_api/containerd/types/introspection.proto": None,
    **{
        f"ctrexec/_api/containerd/events/{n}.proto": f"{_CTRD}events/{n}.proto"
        for n in ("container", "content", "image", "namespace", "snapshot", "task")
    },
    **{
        f"ctrexec/_api/containerd/services/{svc}/v1/{base}.proto": (
            f"{_CTRD}services/{svc}/v1/{base}.proto"
        )
        for svc, base in SERVICES
    },
    "ctrexec/_api/google/rpc/status.proto": "google/rpc/status.proto",
    "ctrexec/_api/cgroups/v1/metrics.proto": "github.com/containerd/cgroups/stats/v1/metrics.proto",
    "ctrexec/_api/cgroups/v2/metrics.proto": "github.com/containerd/cgroups/v2/stats/metrics.proto",
    "ctrexec/_api/runc/options/oci.proto": (
        "github.com/containerd/containerd/runtime/v2/runc/options/oci.proto"
    ),
}


_INTRO = "containerd.services.introspection.v1"
_INTRO_FILE = "ctrexec/_api/containerd/services/introspection/v1/introspection.proto"
_TYPES_INTRO = "ctrexec/_api/containerd/types/introspection.proto"
_IMAGES = "containerd.services.images.v1"

#: What ctrexec defines that containerd 1.6 lacks: containerd 2.x's additions that
#: ctrexec uses when the daemon has them (test_wire_conformance_2x.py checks each of
#: them against 2.x's own protos). A 1.6 server answers an unknown method with
#: Unimplemented, leaves unknown response fields unset, and ignores unknown request
#: fields (proto3). Line -> why it is there. Any other drift fails; so does a line
#: here that 1.6 no longer differs by.
KNOWN_ABSENT_IN_16: dict[str, str] = {
    # Introspection.PluginInfo (2.0): the runc shim's binary name and features.
    f"method {_INTRO}.Introspection/PluginInfo: no upstream counterpart": "PluginInfo",
    f"message {_INTRO}.PluginInfoRequest ({_INTRO_FILE}): no upstream counterpart": "PluginInfo",
    f"message {_INTRO}.PluginInfoResponse ({_INTRO_FILE}): no upstream counterpart": "PluginInfo",
    **{
        f"message containerd.types.{m} ({_TYPES_INTRO}): no upstream counterpart": "PluginInfo"
        for m in ("RuntimeRequest", "RuntimeVersion", "RuntimeInfo", "RuntimeInfo.AnnotationsEntry")
    },
    # ServerResponse's pid, pidns and deprecations (2.0): deprecations in info/doctor.
    **{
        f"field {_INTRO}.ServerResponse.{f}: no upstream counterpart": "Server (2.x)"
        for f in ("pid", "pidns", "deprecations")
    },
    f"message {_INTRO}.DeprecationWarning ({_INTRO_FILE}): no upstream counterpart": "Server",
    # DeleteImageRequest.target (2.x): rmi deletes only the image it resolved.
    # A proto3 optional field brings its synthetic oneof.
    f"field {_IMAGES}.DeleteImageRequest.target: no upstream counterpart": "Delete target",
    f"oneof {_IMAGES}.DeleteImageRequest._target: no upstream counterpart": "Delete target",
    # The same additions, as compare_files sees them in the mirrored files.
    **{
        f"{_INTRO_FILE}: top-level message {m}: no upstream counterpart": "as above"
        for m in ("DeprecationWarning", "PluginInfoRequest", "PluginInfoResponse")
    },
}


def upstream_proto_files() -> list[str]:
    """Every gRPC API file of containerd's api/ tree plus the cgroups metrics."""
    api = GOCODE / _CTRD
    files = sorted(
        p.relative_to(GOCODE).as_posix()
        for p in api.rglob("*.proto")
        if "ttrpc" not in p.relative_to(api).parts  # shim-side ttrpc only
    )
    files += [v for v in FILE_MAP.values() if v and not v.startswith(_CTRD)]
    return files


def _require_upstream() -> None:
    missing = [str(p) for p in UPSTREAM_INCLUDES if not p.is_dir()]
    if not (GOCODE / _CTRD).is_dir():
        missing.append(str(GOCODE / _CTRD))
    if not missing:
        return
    msg = "upstream containerd protos not installed: " + ", ".join(missing)
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(msg + " (CI=true: the conformance check must run)")
    pytest.skip(msg)


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> d.FileDescriptorSet:
    """ctrexec's protos (those for containerd, and for the other peers too)."""
    out = tmp_path_factory.mktemp("ours") / "ours.pb"
    return compile_set([OUR_PROTOS], our_proto_files(), out)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> d.FileDescriptorSet:
    _require_upstream()
    out = tmp_path_factory.mktemp("upstream") / "upstream.pb"
    return compile_set(UPSTREAM_INCLUDES, upstream_proto_files(), out)


# --------------------------------------------------------------------------- tests


def test_file_map_covers_every_proto() -> None:
    assert sorted(FILE_MAP) == our_proto_files(), (
        "protos/ and FILE_MAP disagree; map every new .proto to its upstream file"
    )


def test_wire_identical_to_upstream(
    ours: d.FileDescriptorSet, upstream: d.FileDescriptorSet
) -> None:
    o = build_index(ours, only_prefix=OUR_PREFIX)
    u = build_index(upstream)
    assert o.messages and o.services and o.enums
    known = {k: v for k, v in KNOWN_ABSENT_IN_16.items() if not k.startswith(OUR_PREFIX)}
    fail_on(unexplained(compare(o, u), known), "ctrexec protos drift from containerd 1.6")


def test_mirrored_files_are_complete(
    ours: d.FileDescriptorSet, upstream: d.FileDescriptorSet
) -> None:
    o = build_index(ours, only_prefix=OUR_PREFIX)
    u = build_index(upstream)
    known = {k: v for k, v in KNOWN_ABSENT_IN_16.items() if k.startswith(OUR_PREFIX)}
    drift = compare_files(o, u, FILE_MAP)
    fail_on(unexplained(drift, known), "ctrexec protos incomplete vs containerd 1.6's files")


def test_all_upstream_grpc_services_are_mirrored(
    ours: d.FileDescriptorSet, upstream: d.FileDescriptorSet
) -> None:
    o = build_index(ours, only_prefix=OUR_PREFIX)
    u = build_index(upstream, only_prefix="github.com/containerd/containerd/api/services/")
    missing = sorted(u.services.keys() - o.services.keys())
    assert not missing, f"upstream gRPC services with no ctrexec definition: {missing}"


# ---- the comparison itself must catch drift (needs only our own protos)


def _message(fds: d.FileDescriptorSet, full_name: str) -> d.DescriptorProto:
    for f in fds.file:
        for name, m in walk_messages(f.package, f.message_type):
            if name == full_name:
                return m
    raise KeyError(full_name)


def _field(fds: d.FileDescriptorSet, full_name: str) -> d.FieldDescriptorProto:
    msg_name, _, fname = full_name.rpartition(".")
    for f in _message(fds, msg_name).field:
        if f.name == fname:
            return f
    raise KeyError(full_name)


def _service(fds: d.FileDescriptorSet, full_name: str) -> d.ServiceDescriptorProto:
    for f in fds.file:
        for s in f.service:
            if f"{f.package}.{s.name}" == full_name:
                return s
    raise KeyError(full_name)


def _method(fds: d.FileDescriptorSet, full_name: str) -> d.MethodDescriptorProto:
    svc, _, mname = full_name.rpartition("/")
    for m in _service(fds, svc).method:
        if m.name == mname:
            return m
    raise KeyError(full_name)


def _file(fds: d.FileDescriptorSet, name: str) -> d.FileDescriptorProto:
    for f in fds.file:
        if f.name == name:
            return f
    raise KeyError(name)


TASKS = "containerd.services.tasks.v1"


def _m_number(fds: d.FileDescriptorSet) -> None:
    _field(fds, f"{TASKS}.CreateTaskRequest.rootfs").number = 2


def _m_type(fds: d.FileDescriptorSet) -> None:
    _field(fds, "containerd.v1.types.Process.pid").type = d.FieldDescriptorProto.TYPE_INT32


def _m_label(fds: d.FileDescriptorSet) -> None:
    _field(fds, "containerd.types.Mount.options").label = d.FieldDescriptorProto.LABEL_OPTIONAL


def _m_type_name(fds: d.FileDescriptorSet) -> None:
    _field(fds, f"{TASKS}.GetResponse.process").type_name = ".containerd.v1.types.ProcessInfo"


def _m_drop_method(fds: d.FileDescriptorSet) -> None:
    svc = _service(fds, f"{TASKS}.Tasks")
    keep = [m for m in svc.method if m.name != "Wait"]
    del svc.method[:]
    svc.method.extend(keep)


def _m_streaming(fds: d.FileDescriptorSet) -> None:
    _method(fds, "containerd.services.events.v1.Events/Subscribe").server_streaming = False


def _m_input_type(fds: d.FileDescriptorSet) -> None:
    _method(fds, f"{TASKS}.Tasks/Start").input_type = f".{TASKS}.GetRequest"


def _m_enum_number(fds: d.FileDescriptorSet) -> None:
    f = _file(fds, "ctrexec/_api/containerd/services/content/v1/content.proto")
    (enum,) = [e for e in f.enum_type if e.name == "WriteAction"]
    (commit,) = [v for v in enum.value if v.name == "COMMIT"]
    commit.number = 3


def _m_extra_field(fds: d.FileDescriptorSet) -> None:
    _message(fds, "containerd.types.Mount").field.add(
        name="flags",
        number=5,
        type=d.FieldDescriptorProto.TYPE_UINT32,
        label=d.FieldDescriptorProto.LABEL_OPTIONAL,
    )


def _m_extra_message(fds: d.FileDescriptorSet) -> None:
    _file(fds, "ctrexec/_api/containerd/types/mount.proto").message_type.add(name="Bogus")


def _m_oneof(fds: d.FileDescriptorSet) -> None:
    msg = _message(fds, "containerd.types.Platform")
    msg.oneof_decl.add(name="which")
    for f in msg.field:
        f.oneof_index = 0


def _m_rename_nested(fds: d.FileDescriptorSet) -> None:
    _message(fds, "containerd.services.containers.v1.Container.Runtime").name = "RuntimeInfo"


def _m_syntax(fds: d.FileDescriptorSet) -> None:
    _file(fds, "ctrexec/_api/cgroups/v1/metrics.proto").syntax = "proto2"


def _m_package(fds: d.FileDescriptorSet) -> None:
    _file(fds, "ctrexec/_api/containerd/types/task/task.proto").package = "containerd.types"


MUTATIONS = {
    "field number": (_m_number, f"field {TASKS}.CreateTaskRequest.rootfs: number"),
    "field type": (_m_type, "field containerd.v1.types.Process.pid: type"),
    "field label": (_m_label, "field containerd.types.Mount.options: label"),
    "field type_name": (_m_type_name, f"field {TASKS}.GetResponse.process: type_name"),
    "dropped method": (_m_drop_method, f"method {TASKS}.Tasks/Wait: present upstream"),
    "streaming flag": (
        _m_streaming,
        "method containerd.services.events.v1.Events/Subscribe: server_streaming",
    ),
    "method input": (_m_input_type, f"method {TASKS}.Tasks/Start: input_type"),
    "enum number": (
        _m_enum_number,
        "enum value containerd.services.content.v1.WriteAction.COMMIT: number",
    ),
    "extra field": (_m_extra_field, "field containerd.types.Mount.flags: no upstream"),
    "extra message": (_m_extra_message, "message containerd.types.Bogus"),
    "oneof membership": (_m_oneof, "field containerd.types.Platform.os: oneof"),
    "renamed nested": (
        _m_rename_nested,
        "message containerd.services.containers.v1.Container.RuntimeInfo",
    ),
    "syntax": (_m_syntax, "message io.containerd.cgroups.v1.Metrics: syntax"),
    "package": (_m_package, "message containerd.types.Process"),
}


def test_identical_sets_report_no_drift(ours: d.FileDescriptorSet) -> None:
    idx = build_index(ours, only_prefix=OUR_PREFIX)
    assert compare(idx, build_index(ours)) == []


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_comparison_detects_drift(ours: d.FileDescriptorSet, mutation: str) -> None:
    mutate, expected = MUTATIONS[mutation]
    mutated = copy.deepcopy(ours)
    mutate(mutated)
    reference = build_index(ours)
    drift = compare(build_index(mutated, only_prefix=OUR_PREFIX), reference)
    assert any(line.startswith(expected) for line in drift), (
        f"mutation {mutation!r} not reported; drift was: {drift}"
    )


def test_file_comparison_detects_missing_top_level(ours: d.FileDescriptorSet) -> None:
    mutated = copy.deepcopy(ours)
    f = _file(mutated, "ctrexec/_api/containerd/services/tasks/v1/tasks.proto")
    keep = [m for m in f.message_type if m.name != "ExecProcessResponse"]
    del f.message_type[:]
    f.message_type.extend(keep)
    name = "ctrexec/_api/containerd/services/tasks/v1/tasks.proto"
    drift = compare_files(build_index(mutated), build_index(ours), {name: name})
    assert drift == [
        f"{name}: top-level message ExecProcessResponse: present upstream, missing in ctrexec"
    ]
