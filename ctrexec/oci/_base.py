"""Shared vocabulary of the spec builder: the spec type, the option type, helpers.

The OCI spec is kept as the JSON-shaped ``dict`` that containerd stores and runc
reads, so nothing is lost between what we build, what we send and what a test
inspects. Every option is a function ``Spec -> Spec`` that returns a *new* spec;
:func:`mutating` gives each option a private deep copy, which is what lets a
caller keep a base spec and derive several task specs from it safely.
"""

from __future__ import annotations

import copy
import posixpath
from collections.abc import Callable
from typing import Any

from ctrexec.errors import InvalidArgument

#: An OCI runtime spec as decoded JSON.
Spec = dict[str, Any]

#: A spec option: takes a spec and returns a new one, never touching its input.
SpecOpt = Callable[[Spec], Spec]


def mutating(change: Callable[[Spec], None]) -> SpecOpt:
    """Turn an in-place edit into a pure option that edits a deep copy.

    Options validate their own arguments eagerly (when the option is made) so
    that bad input surfaces before any spec, container or namespace exists;
    ``change`` may still raise :class:`InvalidArgument` for checks that need the
    spec it is applied to.
    """

    def option(spec: Spec) -> Spec:
        new = copy.deepcopy(spec)
        change(new)
        return new

    option.__name__ = getattr(change, "__name__", "option")
    option.__qualname__ = getattr(change, "__qualname__", "option")
    setattr(option, _IN_PLACE, change)
    return option


#: Where :func:`mutating` keeps an option's in-place edit, for :func:`apply_in_place`.
_IN_PLACE = "_ctrexec_in_place"


def apply_in_place(spec: Spec, opts: tuple[SpecOpt, ...]) -> Spec:
    """Apply ``opts`` to a spec the caller owns; the result shares nothing with the
    options' own data.

    A pure option deep-copies the whole spec, seccomp profile included, which made
    a dozen copies per task spec: most of the Python time of a start. The builders
    hand every option a spec that nobody else sees, so the edits go straight in,
    and one copy at the end gives the caller a spec of its own.
    """
    for opt in opts:
        edit = getattr(opt, _IN_PLACE, None)
        if edit is not None:
            edit(spec)
        else:
            spec = opt(spec)
    return copy.deepcopy(spec)


def apply_opts(spec: Spec, *opts: SpecOpt) -> Spec:
    """Apply ``opts`` in order to ``spec`` and return the result (input untouched)."""
    return apply_in_place(copy.deepcopy(spec), opts)


def process_of(spec: Spec) -> dict[str, Any]:
    """The ``process`` object of ``spec``, created if missing."""
    process: dict[str, Any] = spec.setdefault("process", {})
    return process


def linux_of(spec: Spec) -> dict[str, Any]:
    """The ``linux`` object of ``spec``, created if missing."""
    linux: dict[str, Any] = spec.setdefault("linux", {})
    return linux


def resources_of(spec: Spec) -> dict[str, Any]:
    """The ``linux.resources`` object of ``spec``, created if missing."""
    resources: dict[str, Any] = linux_of(spec).setdefault("resources", {})
    return resources


def check_container_path(path: str, what: str) -> str:
    """Validate an absolute path inside the container and return it normalised.

    ``..`` is refused outright rather than normalised away: a path that needs it
    is either a mistake or an attempt to point somewhere the caller did not mean.
    """
    if not isinstance(path, str) or not path:
        raise InvalidArgument(f"{what} must be a non-empty string")
    if "\x00" in path:
        raise InvalidArgument(f"{what} {path!r} contains a NUL byte")
    if not path.startswith("/"):
        raise InvalidArgument(f"{what} {path!r} must be an absolute path")
    if ".." in path.split("/"):
        raise InvalidArgument(f"{what} {path!r} must not contain '..'")
    normal = posixpath.normpath(path)
    # POSIX keeps a leading "//" as implementation-defined; Linux treats it as "/".
    return "/" + normal.lstrip("/")
