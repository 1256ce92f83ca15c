"""The driver's config schemas: as hclspec for Nomad, and the decoder of what Nomad sends.

Nomad decodes a job's (or the agent's) ``config`` block with the schema the plugin
gives (ConfigSchema, TaskConfigSchema), then sends the value as go-cty msgpack: a map
with every attribute of the schema present (nil when absent), defaults already
applied, numbers as ints when integral, a missing block as nil and a missing block
list as an empty array. The decoder here accepts that and also plain msgpack with
keys left out (what Go drivers' unit tests send), applying the same defaults, and
checks each value's type, so a wrong value is refused with its field named.

Only string, bool, number, list(string) and map(string) attributes are used: ``any``
would make cty wrap the value with its type (a 2-element array), which is avoided.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import msgpack

from ctrexec import InvalidField
from ctrexec._api.nomad.hclspec import hcl_spec_pb2 as pb

_TYPES = ("string", "bool", "number", "list(string)", "map(string)")
#: Attributes whose value an error never shows (docs/security.md, "Secrets").
SECRET_ATTRS = frozenset({"password"})


@attrs.frozen
class Attr:
    """One attribute; ``default`` None means none (absent decodes as the type's empty)."""

    name: str
    type: str = attrs.field(validator=attrs.validators.in_(_TYPES))
    default: Any = None
    required: bool = False


@attrs.frozen
class Block:
    """A single optional block (``auth { ... }``); absent decodes as None."""

    name: str
    nested: tuple[Attr, ...]


@attrs.frozen
class BlockList:
    """Repeated blocks (``mount { ... }`` twice); absent decodes as an empty list."""

    name: str
    nested: tuple[Attr, ...]


Entry = Attr | Block | BlockList
Schema = tuple[Entry, ...]


def _literal(value: Any) -> str:
    """An HCL expression for a default: JSON's syntax is HCL's for these types."""
    return json.dumps(value)


def _attr_spec(a: Attr) -> pb.Spec:
    inner = pb.Spec(Attr=pb.Attr(name=a.name, type=a.type, required=a.required))
    if a.default is None:
        return inner
    # Default's primary gets no implied name from the object key: it names itself.
    return pb.Spec(
        default=pb.Default(
            primary=inner, default=pb.Spec(literal=pb.Literal(value=_literal(a.default)))
        )
    )


def _object(entries: Sequence[Entry]) -> pb.Spec:
    spec = pb.Spec(object=pb.Object())
    for e in entries:
        if isinstance(e, Attr):
            spec.object.attributes[e.name].CopyFrom(_attr_spec(e))
        elif isinstance(e, Block):
            spec.object.attributes[e.name].CopyFrom(
                pb.Spec(block_value=pb.Block(name=e.name, nested=_object(e.nested)))
            )
        else:
            spec.object.attributes[e.name].CopyFrom(
                pb.Spec(block_list=pb.BlockList(name=e.name, nested=_object(e.nested)))
            )
    return spec


def to_proto(schema: Schema) -> pb.Spec:
    return _object(schema)


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _check(field: str, a: Attr, value: Any) -> Any:
    value = _text(value)
    if a.type == "string" and isinstance(value, str):
        return value
    if a.type == "bool" and isinstance(value, bool):
        return value
    if a.type == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return value
    if a.type == "list(string)" and isinstance(value, list | tuple):
        items = [_text(v) for v in value]
        if all(isinstance(v, str) for v in items):
            return tuple(items)
    if a.type == "map(string)" and isinstance(value, Mapping):
        pairs = {_text(k): _text(v) for k, v in value.items()}
        if all(isinstance(k, str) and isinstance(v, str) for k, v in pairs.items()):
            return pairs
    # A job's auth { password } is not repeated in the error Nomad shows and logs.
    shown = "<hidden>" if a.name in SECRET_ATTRS else value
    raise InvalidField(field, shown, f"expected {a.type}")


_EMPTY: dict[str, Any] = {"list(string)": (), "map(string)": {}}


def _decode_object(entries: Sequence[Entry], raw: Any, prefix: str) -> dict[str, Any]:
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise InvalidField(prefix.rstrip(".") or "config", raw, "expected a block")
    raw = {_text(k): v for k, v in raw.items()}
    out: dict[str, Any] = {}
    for e in entries:
        value = raw.get(e.name)
        field = f"{prefix}{e.name}"
        if isinstance(e, Attr):
            if value is None:
                if e.required:
                    raise InvalidField(field, None, "is required")
                out[e.name] = e.default if e.default is not None else _EMPTY.get(e.type)
                if isinstance(out[e.name], list):
                    out[e.name] = tuple(out[e.name])
            else:
                out[e.name] = _check(field, e, value)
        elif isinstance(e, Block):
            out[e.name] = None if value is None else _decode_object(e.nested, value, f"{field}.")
        else:
            if value is not None and not isinstance(value, list | tuple):
                raise InvalidField(field, value, "expected a list of blocks")
            out[e.name] = tuple(
                _decode_object(e.nested, v, f"{field}[{i}].") for i, v in enumerate(value or ())
            )
    return out


def decode(schema: Schema, data: bytes, *, what: str = "config") -> dict[str, Any]:
    """The config Nomad sent, every attribute present, defaults applied, types checked."""
    if not data:
        return _decode_object(schema, None, "")
    try:
        raw = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise InvalidField(what, "<msgpack>", f"cannot decode: {exc}") from exc
    return _decode_object(schema, raw, "")
