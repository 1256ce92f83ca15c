"""How Go prints values, and the functions a template calls (for :mod:`.gotemplate`).

Values are JSON-shaped: a plain dict is a Go struct (printed ``{v1 v2}``), a dict
marked as a map (:class:`GoMap`) prints ``map[k:v]`` in key order, a list ``[a b]``,
None ``<nil>`` inside them and ``<no value>`` on its own (a nil interface, as Go
prints a JSON null), :data:`NO_VALUE` (a missing map key) ``<no value>``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from ctrexec import InvalidArgument


class GoMap(dict[str, Any]):
    """A Go map: a missing key is ``<no value>``; ``index`` of one gives ``zero``."""

    def __init__(self, items: Mapping[str, Any] | None = None, zero: Any = None) -> None:
        super().__init__(items or {})
        self.zero = zero


def literal(kind: str, text: str) -> Any:
    """A Go constant's value: ``"str"``, a raw string, a ``'c'`` character, a number.
    ValueError, worded as Go's parser words it, for a malformed one."""
    if kind == "raw":
        return text[1:-1]
    if kind == "str":
        return _unquote(text)
    if kind == "char":
        ch = _unquote('"' + text[1:-1].replace('"', '\\"') + '"')
        if len(ch) != 1:
            raise ValueError(f"malformed character constant: {text}")
        return ord(ch)
    clean = text.replace("_", "")
    try:
        if re.fullmatch(r"[+-]?0[xXbBoO].*", clean):
            return int(clean, 0)
        if re.fullmatch(r"[+-]?0\d+", clean):
            return int(clean, 8)  # Go's legacy octal, 0755
        if re.fullmatch(r"[+-]?\d+", clean):
            return int(clean)
        return float(clean)
    except ValueError:
        raise ValueError(f"bad number syntax: {text!r}") from None


_GO_ONLY_ESCAPES = {"a": "\\u0007", "v": "\\u000b", "'": "'"}


def _unquote(text: str) -> str:
    """A Go double-quoted string: JSON's escapes plus Go's \\a, \\v and \\'."""
    jsonish = re.sub(r"\\([av'])", lambda m: _GO_ONLY_ESCAPES[m.group(1)], text)
    try:
        value: str = json.loads(jsonish)
    except ValueError:
        raise ValueError(f"invalid syntax in {text}") from None
    return value


class _NoValue:
    """Go's invalid reflect.Value: what a missing map key evaluates to."""

    def __repr__(self) -> str:
        return "<no value>"


NO_VALUE: Any = _NoValue()


class FuncError(InvalidArgument):
    """A function refused its arguments (the engine adds where it was called)."""


def go_type(value: Any) -> str:
    """The Go type name an error message gives for ``value``."""
    if value is None or value is NO_VALUE:
        return "<nil>"
    names = [(bool, "bool"), (int, "int"), (float, "float64"), (str, "string"),
             (GoMap, "map[string]interface {}"), (Mapping, "struct"), (list, "[]interface {}"),
             (tuple, "[]interface {}")]  # fmt: skip
    return next((n for t, n in names if isinstance(value, t)), type(value).__name__)


def text(value: Any) -> str:
    """An action's output: Go's ``fmt.Print`` of the value, ``<no value>`` for nil."""
    if value is None or value is NO_VALUE:
        return "<no value>"
    return sprint_value(value)


def sprint_value(value: Any) -> str:
    """Go's ``%v``."""
    if value is NO_VALUE:
        return "<no value>"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, GoMap):
        return "map[" + " ".join(f"{k}:{sprint_value(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, Mapping):  # a struct: its fields' values, not its methods
        return "{" + " ".join(sprint_value(v) for v in value.values() if not callable(v)) + "}"
    if isinstance(value, list | tuple):
        return "[" + " ".join(sprint_value(v) for v in value) + "]"
    return str(value)


def format_float(value: float) -> str:
    """Go's ``%v`` of a float64 (strconv's shortest ``g``): ``e`` form for an exponent
    below -4 or from 6 on, so 1e6 prints ``1e+06`` and 123456.0 ``123456``."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if value == 0:
        return "0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    exp = len(digits) + exponent - 1
    if exp < -4 or exp >= 6:
        mant = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{'-' if sign else ''}{mant}e{exp:+03d}"
    return format(Decimal(repr(value)).normalize(), "f")


def truth(value: Any) -> bool:
    """Go's ``if``: false, 0, nil, an empty string, list or map, and no value are false."""
    if value is None or value is NO_VALUE:
        return False
    if isinstance(value, Mapping) and not isinstance(value, GoMap):
        return True  # a struct is always true
    return bool(value)


# --- printing functions ------------------------------------------------------------------


def go_print(*args: Any) -> str:
    """``print``: Sprint, a space between operands when neither is a string."""
    out = []
    for i, arg in enumerate(args):
        if i and not isinstance(arg, str) and not isinstance(args[i - 1], str):
            out.append(" ")
        out.append(sprint_value(arg))
    return "".join(out)


def go_println(*args: Any) -> str:
    return " ".join(sprint_value(a) for a in args) + "\n"


_VERB = re.compile(r"%([-+# 0]*)(\*|\d+)?(?:\.(\*|\d+)?)?([a-zA-Z%])")


def go_printf(template: Any, *args: Any) -> str:
    """``printf``: Go's verbs v s d q t x X o b e f g c, flags, width and precision."""
    if not isinstance(template, str):
        raise FuncError(f"wrong type for value; expected string; got {go_type(template)}")
    queue = list(args)
    used = 0

    def one(m: re.Match[str]) -> str:
        nonlocal used
        flags, width, prec, verb = m.group(1), m.group(2), m.group(3), m.group(4)
        if verb == "%":
            return "%"
        if used >= len(queue):
            return f"%!{verb}(MISSING)"
        arg = queue[used]
        used += 1
        return _pad(_verb(verb, arg, prec), flags, width, verb)

    out = _VERB.sub(one, template)
    if used < len(queue):
        extra = ", ".join(f"{go_type(a)}={sprint_value(a)}" for a in queue[used:])
        out += f"%!(EXTRA {extra})"
    return out


_INT_SPEC = {"d": "d", "x": "x", "X": "X", "o": "o", "b": "b"}


def _verb(verb: str, arg: Any, prec: str | None) -> str:
    bad = f"%!{verb}({go_type(arg)}={sprint_value(arg)})"
    number = isinstance(arg, int | float) and not isinstance(arg, bool)
    if verb == "v":
        return sprint_value(arg)
    if arg is None:
        return f"%!{verb}(<nil>)"
    if verb == "s":
        return sprint_value(arg)[: int(prec)] if prec else sprint_value(arg)
    if verb == "q":
        return json.dumps(arg, ensure_ascii=False) if isinstance(arg, str) else bad
    if verb == "t":
        return sprint_value(arg) if isinstance(arg, bool) else bad
    if verb in "dxXobc" and isinstance(arg, int) and not isinstance(arg, bool):
        return chr(arg) if verb == "c" else format(arg, _INT_SPEC[verb])
    if verb == "x" and isinstance(arg, str):
        return arg.encode().hex()
    if verb in "eEfFgG" and number:
        if verb in "gG" and prec is None:
            return format_float(float(arg))
        return format(float(arg), f".{prec if prec is not None else 6}{verb}")
    return bad


def _pad(text: str, flags: str, width: str | None, verb: str) -> str:
    if not width or width == "*":
        return text
    n = int(width)
    if "-" in flags:
        return text.ljust(n)
    if "0" in flags and verb in "dxXobeEfFgG":
        sign = text[0] if text[:1] in "+-" else ""
        return sign + text[len(sign) :].rjust(n - len(sign), "0")
    return text.rjust(n)


def to_json(value: Any) -> str:
    """docker's ``json``: compact, UTF-8, no HTML escaping, maps in key order."""

    def plain(v: Any) -> Any:
        if v is NO_VALUE:
            return None
        if isinstance(v, GoMap):
            return {k: plain(v[k]) for k in sorted(v)}
        if isinstance(v, Mapping):  # a struct's methods are not marshalled, as in Go
            return {k: plain(x) for k, x in v.items() if not callable(x)}
        if isinstance(v, list | tuple):
            return [plain(x) for x in v]
        return v

    return json.dumps(plain(value), ensure_ascii=False, separators=(",", ":"))


# --- comparisons and lookups ------------------------------------------------------------


def _kind(x: Any) -> str:
    if x is None or x is NO_VALUE:
        return "nil"
    if isinstance(x, bool):
        return "bool"
    if isinstance(x, int | float):
        return "number"
    return "string" if isinstance(x, str) else "other"


def go_eq(a: Any, *others: Any) -> bool:
    """``eq``: whether ``a`` equals any of the others; basic kinds only, as Go's."""
    if not others:
        raise FuncError("missing argument for comparison")
    for b in others:
        ka, kb = _kind(a), _kind(b)
        if "nil" in (ka, kb):
            if ka == kb:
                return True
            continue
        if ka != kb:
            raise FuncError("incompatible types for comparison")
        if ka == "other":
            raise FuncError("non-comparable type")
        if a == b:
            return True
    return False


def go_ne(a: Any, b: Any) -> bool:
    return not go_eq(a, b)


def _ordered(op: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    def compare(a: Any, b: Any) -> bool:
        ka, kb = _kind(a), _kind(b)
        if ka != kb:
            raise FuncError("incompatible types for comparison")
        if ka not in ("number", "string"):
            raise FuncError("invalid type for comparison")
        return op(a, b)

    return compare


def go_len(value: Any) -> int:
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, Mapping | list | tuple):
        return len(value)
    raise FuncError(f"len of type {go_type(value)}")


def go_index(item: Any, *keys: Any) -> Any:
    """``index``: a map's value (its zero when missing) or a list's element."""
    for key in keys:
        if item is None or item is NO_VALUE:
            raise FuncError("index of untyped nil")
        if isinstance(item, GoMap):
            item = item.get(key, item.zero) if isinstance(key, str) else _bad_key(key)
        elif isinstance(item, Mapping):
            item = item.get(key, NO_VALUE) if isinstance(key, str) else _bad_key(key)
        elif isinstance(item, list | tuple | str):
            if not isinstance(key, int) or isinstance(key, bool):
                raise FuncError(f"cannot index slice/array with type {go_type(key)}")
            if not 0 <= key < len(item):
                raise FuncError(f"index out of range: {key}")
            item = item[key] if not isinstance(item, str) else item.encode()[key]
        else:
            raise FuncError(f"can't index item of type {go_type(item)}")
    return item


def _bad_key(key: Any) -> Any:
    raise FuncError(f"value has type {go_type(key)}; should be string")


def go_slice(item: Any, *idx: Any) -> Any:
    if not isinstance(item, str | list | tuple):
        raise FuncError(f"can't slice item of type {go_type(item)}")
    if len(idx) > 2 or not all(isinstance(i, int) for i in idx):
        raise FuncError("invalid slice index")
    lo = idx[0] if idx else 0
    hi = idx[1] if len(idx) > 1 else len(item)
    if not 0 <= lo <= hi <= len(item):
        raise FuncError(f"index out of range: {hi if hi > len(item) else lo}")
    return item[lo:hi]


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list | tuple):
        raise FuncError(f"wrong type for value; expected []string; got {go_type(value)}")
    return [sprint_value(v) for v in value]


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise FuncError(f"wrong type for value; expected string; got {go_type(value)}")
    return value


def _title(value: Any) -> str:
    return re.sub(r"\S+", lambda m: m.group()[0].upper() + m.group()[1:].lower(), _string(value))


def _truncate(value: Any, n: Any) -> str:
    s = _string(value)
    return s[:n] if isinstance(n, int) and len(s) > n else s


def _pad_words(value: Any, left: Any, right: Any) -> str:
    return " " * int(left) + _string(value) + " " * int(right)


#: Every function a template may name; ``and``/``or`` are evaluated lazily by the engine.
FUNCS: dict[str, Callable[..., Any]] = {
    "and": lambda *a: next((x for x in a if not truth(x)), a[-1]),
    "or": lambda *a: next((x for x in a if truth(x)), a[-1]),
    "not": lambda a: not truth(a),
    "len": go_len,
    "index": go_index,
    "slice": go_slice,
    "print": go_print,
    "printf": go_printf,
    "println": go_println,
    "eq": go_eq,
    "ne": go_ne,
    "lt": _ordered(lambda a, b: a < b),
    "le": _ordered(lambda a, b: a <= b),
    "gt": _ordered(lambda a, b: a > b),
    "ge": _ordered(lambda a, b: a >= b),
    "json": to_json,
    "split": lambda s, sep: _string(s).split(_string(sep)) if sep else list(_string(s)),
    "join": lambda items, sep: _string(sep).join(_strings(items)),
    "title": _title,
    "lower": lambda s: _string(s).lower(),
    "upper": lambda s: _string(s).upper(),
    "pad": _pad_words,
    "truncate": _truncate,
}


def arity_ok(name: str, n: int) -> None:
    """Go checks a function's argument count before calling it."""
    fixed = {"not": 1, "len": 1, "json": 1, "ne": 2, "lt": 2, "le": 2, "gt": 2, "ge": 2,
             "split": 2, "join": 2, "title": 1, "lower": 1, "upper": 1, "pad": 3,
             "truncate": 2}  # fmt: skip
    least = {"and": 1, "or": 1, "index": 1, "slice": 1, "printf": 1, "eq": 1}
    if name in fixed and n != fixed[name]:
        raise FuncError(f"wrong number of args for {name}: want {fixed[name]} got {n}")
    if name in least and n < least[name]:
        raise FuncError(f"wrong number of args for {name}: want at least {least[name]} got {n}")
