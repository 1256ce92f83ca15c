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
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2 as d

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
OUR_PROTOS = REPO / "protos"
OUR_PREFIX = "ctrexec/_api/"

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
FILE_MAP: dict[str, str] = {
    **{
        f"ctrexec/_api/containerd/types/{n}.proto": f"{_CTRD}types/{n}.proto"
        for n in ("descriptor", "metrics", "mount", "platform")
    },
    "ctrexec/_api/containerd/types/task/task.proto": f"{_CTRD}types/task/task.proto",
    **{
        f"ctrexec/_api/containerd/events/{n}.proto": f"{_CTRD}events/{n}.proto"
        for n in ("container", "content", "image", "namespace", "snapshot", "task")
    },
    **{
        f"ctrexec/_api/containerd/services/{svc}/v1/{base}.proto": (
            f"{_CTRD}services/{svc}/v1/{base}.proto"
        )
        for svc, base in (
            ("containers", "containers"),
            ("content", "content"),
            ("diff", "diff"),
            ("events", "events"),
            ("images", "images"),
            ("introspection", "introspection"),
            ("leases", "leases"),
            ("namespaces", "namespace"),
            ("snapshots", "snapshots"),
            ("tasks", "tasks"),
            ("version", "version"),
        )
    },
    "ctrexec/_api/google/rpc/status.proto": "google/rpc/status.proto",
    "ctrexec/_api/cgroups/v1/metrics.proto": "github.com/containerd/cgroups/stats/v1/metrics.proto",
    "ctrexec/_api/cgroups/v2/metrics.proto": "github.com/containerd/cgroups/v2/stats/metrics.proto",
    "ctrexec/_api/runc/options/oci.proto": (
        "github.com/containerd/containerd/runtime/v2/runc/options/oci.proto"
    ),
}


# --------------------------------------------------------------------------- compile


def _wkt_dir() -> Path:
    return Path(str(resources.files("grpc_tools") / "_proto"))


def compile_set(includes: Sequence[Path], files: Sequence[str], out: Path) -> d.FileDescriptorSet:
    """Compile ``files`` (relative to one of ``includes``) into a FileDescriptorSet."""
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        *(f"--proto_path={p}" for p in (*includes, _wkt_dir())),
        "--include_imports",
        f"--descriptor_set_out={out}",
        *files,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.fail(f"protoc failed ({proc.returncode}):\n{proc.stderr}")
    fds = d.FileDescriptorSet()
    fds.ParseFromString(out.read_bytes())
    return fds


#: Our protos for other peers than containerd, checked by their own conformance test
#: (tests/unit/test_nomad_wire.py: Nomad's plugin protocol, go-plugin's services, health).
OTHER_PEERS = tuple(f"{OUR_PREFIX}{d}/" for d in ("nomad", "goplugin", "health"))


def our_proto_files() -> list[str]:
    return sorted(
        rel
        for p in OUR_PROTOS.rglob("*.proto")
        if not (rel := p.relative_to(OUR_PROTOS).as_posix()).startswith(OTHER_PEERS)
    )


def upstream_proto_files() -> list[str]:
    """Every gRPC API file of containerd's api/ tree plus the cgroups metrics."""
    api = GOCODE / _CTRD
    files = sorted(
        p.relative_to(GOCODE).as_posix()
        for p in api.rglob("*.proto")
        if "ttrpc" not in p.relative_to(api).parts  # shim-side ttrpc only
    )
    files += [v for v in FILE_MAP.values() if not v.startswith(_CTRD)]
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
    out = tmp_path_factory.mktemp("ours") / "ours.pb"
    return compile_set([OUR_PROTOS], our_proto_files(), out)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> d.FileDescriptorSet:
    _require_upstream()
    out = tmp_path_factory.mktemp("upstream") / "upstream.pb"
    return compile_set(UPSTREAM_INCLUDES, upstream_proto_files(), out)


# --------------------------------------------------------------------------- compare


@dataclass
class Index:
    """Flattened view of a FileDescriptorSet, keyed by full name (no leading dot)."""

    files: dict[str, d.FileDescriptorProto] = field(default_factory=dict)
    messages: dict[str, tuple[d.DescriptorProto, d.FileDescriptorProto]] = field(
        default_factory=dict
    )
    enums: dict[str, tuple[d.EnumDescriptorProto, d.FileDescriptorProto]] = field(
        default_factory=dict
    )
    services: dict[str, tuple[d.ServiceDescriptorProto, d.FileDescriptorProto]] = field(
        default_factory=dict
    )


def _walk_messages(
    prefix: str, msgs: Iterable[d.DescriptorProto]
) -> Iterator[tuple[str, d.DescriptorProto]]:
    for m in msgs:
        name = f"{prefix}.{m.name}" if prefix else m.name
        yield name, m
        yield from _walk_messages(name, m.nested_type)


def build_index(fds: d.FileDescriptorSet, *, only_prefix: str = "") -> Index:
    idx = Index()
    for f in fds.file:
        if not f.name.startswith(only_prefix):
            continue
        idx.files[f.name] = f
        pkg = f.package
        for e in f.enum_type:
            idx.enums[f"{pkg}.{e.name}" if pkg else e.name] = (e, f)
        for s in f.service:
            idx.services[f"{pkg}.{s.name}" if pkg else s.name] = (s, f)
        for name, m in _walk_messages(pkg, f.message_type):
            idx.messages[name] = (m, f)
            for e in m.enum_type:
                idx.enums[f"{name}.{e.name}"] = (e, f)
    return idx


def _syntax(f: d.FileDescriptorProto) -> str:
    return f.syntax or "proto2"


def _names_drift(what: str, ours: Iterable[str], theirs: Iterable[str]) -> list[str]:
    o, t = set(ours), set(theirs)
    out = [f"{what} {n}: no upstream counterpart" for n in sorted(o - t)]
    out += [f"{what} {n}: present upstream, missing in ctrexec" for n in sorted(t - o)]
    return out


def _field_shape(m: d.DescriptorProto, f: d.FieldDescriptorProto) -> dict[str, object]:
    oneof: str | None = None
    if f.HasField("oneof_index"):
        oneof = m.oneof_decl[f.oneof_index].name
    return {
        "number": f.number,
        "type": d.FieldDescriptorProto.Type.Name(f.type),
        "type_name": f.type_name or None,
        "label": d.FieldDescriptorProto.Label.Name(f.label),
        "oneof": oneof,
        "proto3_optional": f.proto3_optional,
        "packed": f.options.packed if f.options.HasField("packed") else None,
        "default": f.default_value if f.HasField("default_value") else None,
    }


def _compare_message(
    name: str,
    ours: tuple[d.DescriptorProto, d.FileDescriptorProto],
    theirs: tuple[d.DescriptorProto, d.FileDescriptorProto],
) -> list[str]:
    (om, of), (um, uf) = ours, theirs
    drift: list[str] = []
    # proto2 vs proto3 changes presence and packing of repeated scalars.
    if _syntax(of) != _syntax(uf):
        drift.append(f"message {name}: syntax {_syntax(of)} != upstream {_syntax(uf)}")
    if om.options.map_entry != um.options.map_entry:
        drift.append(f"message {name}: map_entry {om.options.map_entry} != upstream")
    drift += _names_drift(
        "oneof",
        (f"{name}.{o.name}" for o in om.oneof_decl),
        (f"{name}.{o.name}" for o in um.oneof_decl),
    )
    drift += _names_drift(
        "nested message",
        (f"{name}.{n.name}" for n in om.nested_type),
        (f"{name}.{n.name}" for n in um.nested_type),
    )
    drift += _names_drift(
        "nested enum",
        (f"{name}.{e.name}" for e in om.enum_type),
        (f"{name}.{e.name}" for e in um.enum_type),
    )
    ofields = {f.name: f for f in om.field}
    ufields = {f.name: f for f in um.field}
    drift += _names_drift(
        "field", (f"{name}.{n}" for n in ofields), (f"{name}.{n}" for n in ufields)
    )
    for fname in sorted(ofields.keys() & ufields.keys()):
        o_shape = _field_shape(om, ofields[fname])
        u_shape = _field_shape(um, ufields[fname])
        for key in o_shape:
            if o_shape[key] != u_shape[key]:
                drift.append(
                    f"field {name}.{fname}: {key} {o_shape[key]!r} != upstream {u_shape[key]!r}"
                )
    return drift


def _compare_enum(name: str, oe: d.EnumDescriptorProto, ue: d.EnumDescriptorProto) -> list[str]:
    ovals = {v.name: v.number for v in oe.value}
    uvals = {v.name: v.number for v in ue.value}
    drift = _names_drift(
        "enum value", (f"{name}.{n}" for n in ovals), (f"{name}.{n}" for n in uvals)
    )
    for vname in sorted(ovals.keys() & uvals.keys()):
        if ovals[vname] != uvals[vname]:
            drift.append(
                f"enum value {name}.{vname}: number {ovals[vname]} != upstream {uvals[vname]}"
            )
    return drift


def _compare_service(
    name: str, os_: d.ServiceDescriptorProto, us: d.ServiceDescriptorProto
) -> list[str]:
    omethods = {m.name: m for m in os_.method}
    umethods = {m.name: m for m in us.method}
    drift = _names_drift(
        "method", (f"{name}/{n}" for n in omethods), (f"{name}/{n}" for n in umethods)
    )
    for mname in sorted(omethods.keys() & umethods.keys()):
        om, um = omethods[mname], umethods[mname]
        for attr in ("input_type", "output_type", "client_streaming", "server_streaming"):
            ov, uv = getattr(om, attr), getattr(um, attr)
            if ov != uv:
                drift.append(f"method {name}/{mname}: {attr} {ov!r} != upstream {uv!r}")
    return drift


def compare(ours: Index, upstream: Index) -> list[str]:
    """Every element ctrexec defines, checked against its upstream counterpart."""
    drift: list[str] = []
    for name, (om, of) in sorted(ours.messages.items()):
        up = upstream.messages.get(name)
        if up is None:
            drift.append(f"message {name} ({of.name}): no upstream counterpart")
        else:
            drift += _compare_message(name, (om, of), up)
    for name, (oe, of) in sorted(ours.enums.items()):
        upe = upstream.enums.get(name)
        if upe is None:
            drift.append(f"enum {name} ({of.name}): no upstream counterpart")
        else:
            drift += _compare_enum(name, oe, upe[0])
    for name, (osvc, of) in sorted(ours.services.items()):
        ups = upstream.services.get(name)
        if ups is None:
            drift.append(f"service {name} ({of.name}): no upstream counterpart")
        else:
            drift += _compare_service(name, osvc, ups[0])
    return drift


def compare_files(ours: Index, upstream: Index, file_map: dict[str, str]) -> list[str]:
    """Each mirrored file has the upstream file's package and top-level elements."""
    drift: list[str] = []
    for our_name, up_name in sorted(file_map.items()):
        of = ours.files.get(our_name)
        uf = upstream.files.get(up_name)
        if of is None or uf is None:
            drift.append(
                f"file {our_name} -> {up_name}: not compiled (ours={of is not None}, "
                f"upstream={uf is not None})"
            )
            continue
        if of.package != uf.package:
            drift.append(f"file {our_name}: package {of.package!r} != upstream {uf.package!r}")
        for kind, oitems, uitems in (
            ("message", of.message_type, uf.message_type),
            ("enum", of.enum_type, uf.enum_type),
            ("service", of.service, uf.service),
        ):
            drift += _names_drift(
                f"{our_name}: top-level {kind}",
                (i.name for i in oitems),
                (i.name for i in uitems),
            )
    return drift


def _fail_on(drift: list[str], title: str) -> None:
    if drift:
        pytest.fail(f"{title} ({len(drift)} problems):\n  " + "\n  ".join(drift), pytrace=False)


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
    _fail_on(compare(o, u), "ctrexec protos drift from upstream containerd")


def test_mirrored_files_are_complete(
    ours: d.FileDescriptorSet, upstream: d.FileDescriptorSet
) -> None:
    o = build_index(ours, only_prefix=OUR_PREFIX)
    u = build_index(upstream)
    _fail_on(compare_files(o, u, FILE_MAP), "ctrexec protos incomplete vs upstream files")


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
        for name, m in _walk_messages(f.package, f.message_type):
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
