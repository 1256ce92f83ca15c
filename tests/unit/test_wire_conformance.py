"""Wire conformance of ctrexec's own protos/ against containerd's upstream protos.

ctrexec writes its own .proto text for containerd's API v1 (see protos/). That
text must stay wire-identical to containerd's: same full names (gRPC method
paths and Any type URLs depend on them), same field numbers, types, labels and
oneofs, same enum numbers, same RPC shapes. Both sides are compiled with
grpc_tools.protoc into FileDescriptorSets and compared element by element.

The upstream sources are Debian 12's golang packages (containerd 1.6, cgroups 1.0,
gogo): those installed under /usr/share/gocode when they are these versions, otherwise
(Debian 13 installs containerd 1.7's, and cgroups 3, which adds fields and moved
stats/v1 to cgroup1/stats) bookworm's, which ``scripts/fetch-containerd 1.6-api``
unpacks into .containerd/1.6-api/. Comparing against the newer packages would test
another version, not 1.6. If neither is available the comparison is skipped, unless
CI=true, where it fails.
"""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path

import pytest
from _wirecmp import (
    OUR_PREFIX,
    OUR_PROTOS,
    REPO,
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

INSTALLED = Path("/usr/share/gocode/src")
FETCH = ("bash", str(REPO / "scripts/fetch-containerd"), "1.6-api")
_CTRD = "github.com/containerd/containerd/api/"
#: Where containerd's tree says which version it is (Debian ships it with the api/).
_VERSION_GO = "github.com/containerd/containerd/version/version.go"


def upstream_includes(gocode: Path) -> tuple[Path, ...]:
    """The roots protoc resolves 1.6's imports under, gogo's among them."""
    return (
        gocode,
        gocode / "github.com/gogo/protobuf",
        gocode / "github.com/gogo/protobuf/protobuf",
        gocode / "github.com/gogo/googleapis",
    )


def is_16_tree(gocode: Path) -> bool:
    """Whether ``gocode`` holds containerd 1.6's and cgroups 1.0's protos, gogo's too."""
    try:
        version = (gocode / _VERSION_GO).read_text()
    except OSError:
        return False
    needed = [gocode / _CTRD, *upstream_includes(gocode)]
    cgroups = [gocode / v for k, v in FILE_MAP.items() if v and "/cgroups/" in k]
    return (
        'Version = "1.6.' in version
        and all(p.is_dir() for p in needed)
        and all(p.is_file() for p in cgroups)
    )


# Our file (relative to protos/) -> the upstream file it mirrors (relative to the gocode root
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


def upstream_proto_files(gocode: Path) -> list[str]:
    """Every gRPC API file of containerd's api/ tree plus the cgroups metrics."""
    api = gocode / _CTRD
    files = sorted(
        p.relative_to(gocode).as_posix()
        for p in api.rglob("*.proto")
        if "ttrpc" not in p.relative_to(api).parts  # shim-side ttrpc only
    )
    files += [v for v in FILE_MAP.values() if v and not v.startswith(_CTRD)]
    return files


def upstream_16_root() -> Path:
    """The installed tree when it is 1.6's, otherwise bookworm's, from the fetch
    script's last line (with the tree in place it only prints it, no network)."""
    if is_16_tree(INSTALLED):
        return INSTALLED
    proc = subprocess.run(FETCH, capture_output=True, text=True, check=False)
    lines = proc.stdout.strip().splitlines()
    root = Path(lines[-1]) if proc.returncode == 0 and lines else None
    if root is not None and is_16_tree(root):
        return root
    msg = (
        f"containerd 1.6 protos unavailable: {INSTALLED} holds another version or none,"
        f" and {' '.join(FETCH[1:])} gave exit {proc.returncode}: {proc.stderr.strip()[-400:]}"
    )
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
    gocode = upstream_16_root()
    out = tmp_path_factory.mktemp("upstream") / "upstream.pb"
    return compile_set(upstream_includes(gocode), upstream_proto_files(gocode), out)


# --------------------------------------------------------------------------- tests


def test_file_map_covers_every_proto() -> None:
    assert sorted(FILE_MAP) == our_proto_files(), (
        "protos/ and FILE_MAP disagree; map every new .proto to its upstream file"
    )


def _tree(root: Path, version: str, cgroups: tuple[str, str]) -> Path:
    """A gocode root as Debian lays it out: containerd's version, cgroups' stats protos."""
    for d_ in (_CTRD, *(p.relative_to(root) for p in upstream_includes(root)[1:])):
        (root / d_).mkdir(parents=True, exist_ok=True)
    (root / _VERSION_GO).parent.mkdir(parents=True)
    (root / _VERSION_GO).write_text(f'\tVersion = "{version}"\n')
    for rel in cgroups:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text('syntax = "proto3";\n')
    return root


def test_only_debian_12s_packages_are_taken_for_16s(tmp_path: Path) -> None:
    """Debian 13's containerd 1.7 and cgroups 3 (cgroup1/stats, cgroup2/stats) are
    another version: the test then compares against bookworm's, fetched."""
    cg = "github.com/containerd/cgroups/"
    bookworm = _tree(
        tmp_path / "12",
        "1.6.20+unknown",
        (f"{cg}stats/v1/metrics.proto", f"{cg}v2/stats/metrics.proto"),
    )
    trixie = _tree(
        tmp_path / "13",
        "1.7.24+unknown",
        (f"{cg}cgroup1/stats/metrics.proto", f"{cg}cgroup2/stats/metrics.proto"),
    )
    mixed = _tree(
        tmp_path / "mixed",
        "1.6.20+unknown",
        (f"{cg}cgroup1/stats/metrics.proto", f"{cg}cgroup2/stats/metrics.proto"),
    )
    assert is_16_tree(bookworm)
    assert not is_16_tree(trixie) and not is_16_tree(mixed)
    assert not is_16_tree(tmp_path / "none")


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
