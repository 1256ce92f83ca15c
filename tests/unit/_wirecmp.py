"""Compiling .proto files and comparing them element by element, for the wire
conformance tests (test_wire_conformance.py against containerd 1.6's protos,
test_wire_conformance_2x.py against 2.x's).

Both sides are compiled with grpc_tools.protoc into FileDescriptorSets; a drift is
one line of text naming the element (``field containerd.types.Mount.options: ...``),
so a test can list the drift it expects, line by line, with the reason.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2 as d

#: containerd's gRPC services ctrexec mirrors: (directory, file name) under services/.
SERVICES = (
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

REPO = Path(__file__).resolve().parents[2]
OUR_PROTOS = REPO / "protos"
OUR_PREFIX = "ctrexec/_api/"

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


def walk_messages(
    prefix: str, msgs: Iterable[d.DescriptorProto]
) -> Iterator[tuple[str, d.DescriptorProto]]:
    for m in msgs:
        name = f"{prefix}.{m.name}" if prefix else m.name
        yield name, m
        yield from walk_messages(name, m.nested_type)


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
        for name, m in walk_messages(pkg, f.message_type):
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


def compare_files(ours: Index, upstream: Index, file_map: Mapping[str, str | None]) -> list[str]:
    """Each mirrored file has the upstream file's package and top-level elements."""
    drift: list[str] = []
    for our_name, up_name in sorted(file_map.items()):
        if up_name is None:
            continue  # a file the upstream side has no counterpart of (said where mapped)
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


def fail_on(drift: list[str], title: str) -> None:
    if drift:
        pytest.fail(f"{title} ({len(drift)} problems):\n  " + "\n  ".join(drift), pytrace=False)


def rename_messages(fds: d.FileDescriptorSet, renames: Mapping[str, str]) -> Index:
    """``fds`` indexed with each message of ``renames`` (full name -> name to compare
    it under) moved to its new name, and every field and method that refers to it
    rewritten alike: for a message that moved between packages but kept its fields."""
    fds = copy.deepcopy(fds)
    dotted = {f".{old}": f".{new}" for old, new in renames.items()}
    for f in fds.file:
        for _, m in walk_messages(f.package, f.message_type):
            for fld in m.field:
                fld.type_name = dotted.get(fld.type_name, fld.type_name)
        for s in f.service:
            for meth in s.method:
                meth.input_type = dotted.get(meth.input_type, meth.input_type)
                meth.output_type = dotted.get(meth.output_type, meth.output_type)
    idx = build_index(fds)
    for old, new in renames.items():
        idx.messages[new] = idx.messages.pop(old)
    return idx


def unexplained(drift: Iterable[str], known: Mapping[str, str]) -> list[str]:
    """What a comparison found beyond the ``known`` drift lines, and each known line
    it no longer finds (the list must shrink when the difference goes)."""
    found = set(drift)
    out = [f"not in the known list: {line}" for line in sorted(found - known.keys())]
    out += [f"known but no longer found: {line}" for line in sorted(known.keys() - found)]
    return out
