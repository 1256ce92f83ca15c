"""Our Nomad and go-plugin protos against the wire facts of Nomad 2.0.5 / go-plugin 1.8.

Every service, method (with its streaming flags), message, field (number, type, label,
type name, oneof) and enum value of the facts file must be what our generated
descriptors say, and the reverse: nothing extra. The facts are copied into tests/data
because a user's clone has no ../shared.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor as d

FACTS = json.loads((Path(__file__).parent.parent / "data" / "nomad-wire-2.0.5.json").read_text())

#: upstream file name (as in the facts) -> our generated module
MODULES = {
    "internal/plugin/grpc_broker.proto": "ctrexec._api.goplugin.grpc_broker_pb2",
    "internal/plugin/grpc_controller.proto": "ctrexec._api.goplugin.grpc_controller_pb2",
    "internal/plugin/grpc_stdio.proto": "ctrexec._api.goplugin.grpc_stdio_pb2",
    "plugins/base/proto/base.proto": "ctrexec._api.nomad.base.base_pb2",
    "plugins/drivers/proto/driver.proto": "ctrexec._api.nomad.drivers.driver_pb2",
    "plugins/shared/hclspec/hcl_spec.proto": "ctrexec._api.nomad.hclspec.hcl_spec_pb2",
    "plugins/shared/structs/proto/attribute.proto": "ctrexec._api.nomad.structs.attribute_pb2",
    "plugins/shared/structs/proto/recoverable_error.proto": (
        "ctrexec._api.nomad.structs.recoverable_error_pb2"
    ),
    "plugins/shared/structs/proto/stats.proto": "ctrexec._api.nomad.structs.stats_pb2",
}

_TYPES = {
    v: k[len("TYPE_") :].lower()
    for k, v in vars(d.FieldDescriptor).items()
    if k.startswith("TYPE_")
}


def _label(f: d.FieldDescriptor) -> str:
    if f.is_repeated:
        return "repeated"
    return "required" if f.is_required else "optional"


def _field(f: d.FieldDescriptor, in_map_entry: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"number": f.number, "type": _TYPES[f.type]}
    if not in_map_entry:  # the facts give map keys and values no label
        out["label"] = _label(f)
    if f.message_type is not None:
        out["type_name"] = "." + f.message_type.full_name
    elif f.enum_type is not None:
        out["type_name"] = "." + f.enum_type.full_name
    if f.containing_oneof is not None:
        out["oneof"] = f.containing_oneof.name
    return out


def _walk(msg: d.Descriptor, messages: dict[str, Any], enums: dict[str, Any]) -> None:
    entry = msg.GetOptions().map_entry
    body: dict[str, Any] = {"fields": {f.name: _field(f, entry) for f in msg.fields}}
    if entry:
        body["map_entry"] = True
    messages[msg.full_name] = body
    for e in msg.enum_types:
        enums[e.full_name] = {v.name: v.number for v in e.values}
    for nested in msg.nested_types:
        _walk(nested, messages, enums)


def _describe(fd: d.FileDescriptor) -> dict[str, Any]:
    messages: dict[str, Any] = {}
    enums: dict[str, Any] = {
        e.full_name: {v.name: v.number for v in e.values} for e in fd.enum_types_by_name.values()
    }
    for msg in fd.message_types_by_name.values():
        _walk(msg, messages, enums)
    services = {
        s.full_name: {
            m.name: {
                "client_streaming": m.client_streaming,
                "server_streaming": m.server_streaming,
                "input": "." + m.input_type.full_name,
                "output": "." + m.output_type.full_name,
            }
            for m in s.methods
        }
        for s in fd.services_by_name.values()
    }
    return {"enums": enums, "messages": messages, "package": fd.package, "services": services}


def test_every_upstream_file_has_ours() -> None:
    assert sorted(FACTS["files"]) == sorted(MODULES)


@pytest.mark.parametrize("upstream", sorted(MODULES))
@pytest.mark.parametrize("part", ["package", "services", "messages", "enums"])
def test_matches_the_wire_facts(upstream: str, part: str) -> None:
    ours = _describe(importlib.import_module(MODULES[upstream]).DESCRIPTOR)
    assert ours[part] == FACTS["files"][upstream][part]


def test_the_conformance_walk_sees_streams_and_oneofs() -> None:
    """The comparison is only worth something if it reads the flags it compares."""
    ours = _describe(
        importlib.import_module(MODULES["plugins/drivers/proto/driver.proto"]).DESCRIPTOR
    )
    driver = ours["services"]["hashicorp.nomad.plugins.drivers.proto.Driver"]
    assert driver["ExecTaskStreaming"]["client_streaming"] is True
    assert driver["WaitTask"]["server_streaming"] is False
    spec = _describe(
        importlib.import_module(MODULES["plugins/shared/hclspec/hcl_spec.proto"]).DESCRIPTOR
    )
    assert (
        spec["messages"]["hashicorp.nomad.plugins.shared.hclspec.Spec"]["fields"]["Attr"]["oneof"]
        == "block"
    )


def test_health_is_the_standard_service() -> None:
    from ctrexec._api.health.v1 import health_pb2

    svc = health_pb2.DESCRIPTOR.services_by_name["Health"]
    assert svc.full_name == "grpc.health.v1.Health"
    assert health_pb2.HealthCheckResponse.SERVING == 1
