"""What a public call returns, a user can name: every ctrexec class that a public
function or method of a public class returns is exported too (issue 38: ``create``,
``lookup`` and ``rename`` returned types a user could not import)."""

from __future__ import annotations

import builtins
import inspect
import re
import sys
from collections.abc import Callable, Iterator

import ctrexec
from ctrexec import _rpc
from ctrexec.containerd import containers

#: Names a return annotation may use that are not ctrexec's: the standard library's and
#: protobuf's, which a user imports from there.
FOREIGN = frozenset({"Any", "AsyncIterator", "Callable", "Future", "IO", "Iterator",
                     "Mapping", "NoReturn", "Path", "Self", "Sequence", "Timestamp",
                     "datetime"})  # fmt: skip
_WORD = re.compile(r"[A-Za-z_][\w.]*")


def _public_callables() -> Iterator[tuple[str, Callable[..., object]]]:
    for name in ctrexec.__all__:
        obj = getattr(ctrexec, name)
        if inspect.isclass(obj):
            for attr in dir(obj):
                if attr.startswith("_"):
                    continue
                raw = inspect.getattr_static(obj, attr)
                fn = raw.fget if isinstance(raw, property) else getattr(raw, "__func__", raw)
                if inspect.isfunction(fn):
                    yield f"{name}.{attr}", fn
        elif inspect.isfunction(obj):
            yield name, obj


def _unexported(fn: Callable[..., object]) -> set[str]:
    """The names in ``fn``'s return annotation that are ctrexec classes not exported."""
    annotation = inspect.signature(fn).return_annotation
    if annotation is inspect.Signature.empty or not isinstance(annotation, str):
        return set()
    where = vars(sys.modules[fn.__module__])
    exported = {id(getattr(ctrexec, n)) for n in ctrexec.__all__}
    out = set()
    for word in _WORD.findall(annotation):
        head, *rest = word.split(".")
        if word in vars(builtins) or (not rest and word in FOREIGN):
            continue
        value = where.get(head)
        for part in rest:
            value = getattr(value, part, None)
        if value is None:
            if word.split(".")[-1] not in (*FOREIGN, *ctrexec.__all__):
                out.add(word)  # a name only type checkers see: it must be public by name
        elif (
            inspect.isclass(value)
            and value.__module__.startswith("ctrexec")
            and id(value) not in exported
        ):
            out.add(word)
    return out


def test_what_public_calls_return_is_exported() -> None:
    found = {
        owner: sorted(names)
        for owner, fn in _public_callables()
        if (names := _unexported(fn)) and not getattr(fn, "__deprecated__", False)
    }
    # Client.rpc (deprecated) gives the raw RPC's connection; Descriptor.to_proto the
    # wire's own message, for the library's calls that build requests
    found.pop("Client.rpc", None)
    found.pop("Descriptor.to_proto", None)
    assert found == {}


def test_the_rule_sees_an_unexported_return() -> None:
    def made() -> containers.Lookup:  # exported, under another name
        raise NotImplementedError

    def hidden() -> _rpc.Connection:
        raise NotImplementedError

    def unseen() -> Unseen:  # noqa: F821 - a name only a type checker would see
        raise NotImplementedError

    assert _unexported(made) == set()
    assert _unexported(hidden) == {"_rpc.Connection"}
    assert _unexported(unseen) == {"Unseen"}
