"""Checks for the fields of config values: type first, then range, naming the field.

A :class:`~ctrexec.tasks.config.TaskConfig` is where user input enters the library,
from Python, the CLI and group files alike, so each field is checked there, once,
and a failure is an :class:`~ctrexec.errors.InvalidField` that says which field,
which value and what was expected. No bound is written here: a range check calls
the validator of the spec option that will use the value (``with_cpus`` and its
kin validate eagerly), so the limit a user is told is the one the spec enforces.

``bool`` is an ``int`` to Python, but ``cpus = true`` in a group file is a mistake,
so a bool passes only where a bool is expected.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ctrexec.errors import InvalidArgument, InvalidField

if TYPE_CHECKING:
    from ctrexec.paths import StrPath

#: A range check: raises InvalidArgument for a value of the right type but wrong size.
Check = Callable[[Any], object]
#: The shape of an attrs validator.
Validator = Callable[[Any, Any, Any], None]

NUMBER = (int, float)


def check(
    name: str,
    value: Any,
    types: tuple[type, ...],
    expected: str,
    rule: Check | None = None,
) -> None:
    """Refuse ``value`` unless it is one of ``types`` and passes ``rule``."""
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise InvalidField(name, value, f"expected {expected}")
    if rule is not None:
        with naming(name, value):
            rule(value)


@contextlib.contextmanager
def naming(name: str, value: Any) -> Iterator[None]:
    """Turn an InvalidArgument raised inside into an InvalidField for ``name``."""
    try:
        yield
    except InvalidField:
        raise
    except InvalidArgument as exc:
        raise InvalidField(name, value, str(exc)) from exc


def field(
    types: tuple[type, ...], expected: str, rule: Check | None = None, *, optional: bool = False
) -> Validator:
    """An attrs validator for :func:`check`; ``optional`` lets None through."""

    def validate(_inst: Any, attribute: Any, value: Any) -> None:
        if value is None and optional:
            return
        check(attribute.name, value, types, expected, rule)

    return validate


def text(rule: Check | None = None, *, optional: bool = False) -> Validator:
    return field((str,), "a string", rule, optional=optional)


def integer(rule: Check | None = None, *, optional: bool = False) -> Validator:
    return field((int,), "an integer", rule, optional=optional)


def number(rule: Check | None = None, *, optional: bool = False) -> Validator:
    def finite(value: float) -> None:
        if not math.isfinite(value):
            raise InvalidArgument("expected a finite number")
        if rule is not None:
            rule(value)

    return field(NUMBER, "a number", finite, optional=optional)


def boolean() -> Validator:
    return field((bool,), "true or false")


def strings(rule: Check | None = None, *, optional: bool = False) -> Validator:
    """A list of strings (held as a tuple), none with a NUL byte, then ``rule``."""

    def each(values: tuple[Any, ...]) -> None:
        for item in values:
            if not isinstance(item, str):
                raise InvalidArgument(f"expected a list of strings; {item!r} is not one")
            if "\x00" in item:
                raise InvalidArgument(f"{item!r} contains a NUL byte")
        if rule is not None:
            rule(values)

    return field((tuple,), "a list of strings", each, optional=optional)


def string_map(rule: Check | None = None) -> Validator:
    """A table of string keys to string values, then ``rule``."""

    def each(values: Mapping[Any, Any]) -> None:
        for key, value in values.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise InvalidArgument(f"expected a table of strings; {key!r} = {value!r} is not")
        if rule is not None:
            rule(values)

    return field((dict,), "a table of strings", each)


def non_negative(value: float) -> None:
    if value < 0:
        raise InvalidArgument(f"must not be negative, got {value}")


def to_tuple(value: Any) -> Any:
    """A list becomes a tuple; anything else is left for the validator to judge."""
    return tuple(value) if isinstance(value, list | tuple) else value


def to_opt_tuple(value: Any) -> Any:
    return None if value is None else to_tuple(value)


def to_string_map(value: Any) -> Any:
    """A mapping with numbers as values (``PORT = 8080`` in TOML) gets them as strings.

    Booleans are not turned into ``"True"``: compose refuses them too, so they are
    left for the validator to refuse.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        return value
    return {
        k: str(v) if isinstance(v, NUMBER) and not isinstance(v, bool) else v
        for k, v in value.items()
    }


def text_or_none(value: StrPath | None) -> str | None:
    """An attrs converter: a path-like to its ``str``; anything else as given, for the
    field's validator to accept or refuse in its own words."""
    return os.fspath(value) if isinstance(value, os.PathLike) else value


# ------------------------------------------- values whose owner elsewhere checks them


def platform(value: str) -> None:
    """docker's --platform: ``os/arch[/variant]``, parsed by the one owner, as pull does."""
    from ctrexec.containerd.content import Platform  # only for a config that names one

    Platform.parse(value)


def nameservers(servers: tuple[str, ...]) -> None:
    """resolv.conf takes nameservers as IP addresses only."""
    import ipaddress  # here, for start-up cost: only a config that names servers loads it

    for server in servers:
        try:
            ipaddress.ip_address(server)
        except ValueError as exc:
            raise InvalidArgument(f"nameserver {server!r} is not an IP address") from exc


def extra_hosts(entries: tuple[str, ...]) -> None:
    """Each ``HOST:IP`` as the hosts file that writes them parses it."""
    if not entries:
        return
    from ctrexec.net.hostfiles import parse_extra_host  # only for a config that has some

    for entry in entries:
        parse_extra_host(entry)


@attrs.frozen
class Problem:
    """Something wrong around a task that its state alone does not say (its group's
    namespace pin lost, a split...): what it is, the facts, and the command that
    repairs it. Found by :mod:`ctrexec.tasks.health`; ``ps`` and ``inspect`` show it."""

    what: str
    detail: str = ""
    repair: str = ""

    def __str__(self) -> str:
        text = f"{self.what} ({self.detail})" if self.detail else self.what
        return f"{text}; {self.repair}" if self.repair else text

    def to_json(self) -> dict[str, str]:
        return {"problem": self.what, "detail": self.detail, "repair": self.repair}
