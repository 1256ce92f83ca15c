"""Go's text/template, as far as ``docker ps --format`` and ``docker inspect -f`` use it.

No package on PyPI fits (the candidates were pre-1.0 single releases, or a bundled Go
shared library for one architecture), so this is a small interpreter of its own, kept
to Go's documented behaviour: text and ``{{ }}`` actions with ``{{-``/``-}}`` trim
markers and ``{{/* comments */}}``; pipelines (``a | b``), fields (``.A.B``), ``.``,
variables (``$``, ``$x := ...``, ``$x = ...``), literals, parenthesised pipelines;
``if``/``else if``/``else``, ``range`` (with ``$i, $e :=``, ``else``, ``break``,
``continue``), ``with``/``else with``; Go's functions ``and or not len index slice
print printf println eq ne lt le gt ge`` and docker's ``json split join title lower
upper pad truncate``. ``define``/``template``/``block`` are refused.

The data is JSON-shaped. A plain ``dict`` stands for a Go struct: a missing field is an
error, as docker's inspect says (``map has no entry for key``), and it prints as
``{v1 v2}``. A :class:`GoMap` is a Go map: a missing key is ``<no value>``, ``index``
gives the map's zero value, and it prints as ``map[k:v]`` in key order. A callable is
a method: ``{{.Label "k"}}`` calls it. Errors are :class:`TemplateError`, worded as Go's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ctrexec import InvalidArgument
from ctrexec.cli.views import gofuncs
from ctrexec.cli.views.gofuncs import NO_VALUE, GoMap

__all__ = ["GoMap", "Template", "TemplateError", "parse"]


class TemplateError(InvalidArgument):
    """A template that does not parse, or fails while it runs (Go's own wording).

    Exit code 1, docker's for a ``--format`` that fails (``inspect`` gives 64 for one
    that does not parse: :mod:`ctrexec.cli.inspect` says so)."""

    exit_code = 1


# --- lexing -------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""(?P<space>\s+)
    |(?P<str>"(?:[^"\\\n]|\\.)*")
    |(?P<raw>`[^`]*`)
    |(?P<char>'(?:[^'\\\n]|\\.)+')
    |(?P<decl>:=)
    |(?P<num>[+-]?(?:0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|(?:\d[\d_]*\.?[\d_]*|\.\d[\d_]*)(?:[eE][+-]?\d+)?))
    |(?P<field>\.[A-Za-z_][A-Za-z0-9_]*)
    |(?P<dot>\.)
    |(?P<var>\$[A-Za-z0-9_]*)
    |(?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<punct>[|(),=])
    """,
    re.VERBOSE,
)


class _Tok:
    __slots__ = ("kind", "spaced", "text")

    def __init__(self, kind: str, text: str, spaced: bool) -> None:
        self.kind, self.text, self.spaced = kind, text, spaced


def _lex_action(body: str, line: int) -> list[_Tok]:
    toks: list[_Tok] = []
    pos, spaced = 0, True
    while pos < len(body):
        m = _TOKEN.match(body, pos)
        if m is None:
            raise TemplateError(f"template: :{line}: unexpected {body[pos]!r} in command")
        pos = m.end()
        kind = m.lastgroup or ""
        if kind == "space":
            spaced = True
            continue
        if kind == "num" and toks and not spaced and m.group().startswith(("+", "-")):
            raise TemplateError(f"template: :{line}: unexpected {m.group()!r} in operand")
        toks.append(_Tok(kind, m.group(), spaced))
        spaced = False
    return toks


_WS = (" ", "\t", "\r", "\n")


def _split(src: str) -> Iterator[tuple[str, object, int]]:
    """Text and actions in order: ("text", str, line) and ("action", tokens, line)."""
    pos, line = 0, 1
    trim_next = False
    while pos <= len(src):
        start = src.find("{{", pos)
        text = src[pos:] if start < 0 else src[pos:start]
        left_trim = (
            start >= 0 and src[start + 2 : start + 3] == "-" and src[start + 3 : start + 4] in _WS
        )
        if trim_next:
            text = text.lstrip(" \t\r\n")
        if left_trim:
            text = text.rstrip(" \t\r\n")
        if text:
            yield ("text", text, line)
        line += src.count("\n", pos, start if start >= 0 else len(src))
        if start < 0:
            return
        inner = start + (4 if left_trim else 2)
        end, right_trim = _action_end(src, inner, line)
        body = src[inner:end]
        if not body.strip().startswith("/*"):
            yield ("action", _lex_action(body, line), line)
        elif not body.strip().endswith("*/"):
            raise TemplateError(f"template: :{line}: unclosed comment")
        line += body.count("\n")
        trim_next = right_trim
        pos = end + (4 if right_trim else 2)


def _action_end(src: str, pos: int, line: int) -> tuple[int, bool]:
    """Where the action's ``}}`` (or `` -}}``) is, past quoted text."""
    quote = ""
    i = pos
    if src[pos:].lstrip(" \t\r\n").startswith("/*"):  # a comment: quotes mean nothing
        close = src.find("*/", pos)
        i = close + 2 if close >= 0 else len(src)
    while i < len(src):
        c = src[i]
        if quote:
            if c == "\\" and quote != "`":
                i += 2
                continue
            if c == quote:
                quote = ""
            elif c == "\n" and quote != "`":
                raise TemplateError(f"template: :{line}: unterminated quoted string")
        elif c in "\"'`":
            quote = c
        elif src.startswith("}}", i):
            trim = i >= 2 and src[i - 1] == "-" and src[i - 2] in " \t\r\n"
            return (i - 2 if trim else i), trim
        i += 1
    raise TemplateError(f"template: :{line}: unclosed action")


# --- nodes ----------------------------------------------------------------------------


class _Node:
    line = 0


class _Text(_Node):
    def __init__(self, text: str) -> None:
        self.text = text


class _Pipe(_Node):
    def __init__(self, decls: list[str], assign: bool, cmds: list[list[_Node]], src: str) -> None:
        self.decls, self.assign, self.cmds, self.src = decls, assign, cmds, src


class _Action(_Node):
    def __init__(self, pipe: _Pipe) -> None:
        self.pipe = pipe


class _Branch(_Node):
    """if, range and with: a pipeline, its body and its else part."""

    def __init__(self, kind: str, pipe: _Pipe, body: list[_Node], other: list[_Node]) -> None:
        self.kind, self.pipe, self.body, self.other = kind, pipe, body, other


class _Loop(_Node):
    def __init__(self, word: str) -> None:
        self.word = word


class _Field(_Node):
    """``.A.B`` from dot (``base`` None), a variable, or a parenthesised pipeline."""

    def __init__(self, base: _Node | None, names: list[str]) -> None:
        self.base, self.names = base, names


class _Var(_Node):
    def __init__(self, name: str) -> None:
        self.name = name


class _Dot(_Node):
    pass


class _Func(_Node):
    def __init__(self, name: str) -> None:
        self.name = name


class _Lit(_Node):
    def __init__(self, value: Any) -> None:
        self.value = value


class _Sub(_Node):
    def __init__(self, pipe: _Pipe) -> None:
        self.pipe = pipe


# --- parsing ---------------------------------------------------------------------------


class _Parser:
    def __init__(self, src: str, funcs: Mapping[str, Callable[..., Any]]) -> None:
        self.items = list(_split(src))
        self.pos = 0
        self.funcs = funcs
        self.vars: list[str] = ["$"]
        self.loops = 0

    def error(self, line: int, msg: str) -> TemplateError:
        return TemplateError(f"template: :{line}: {msg}")

    def parse_list(self, ends: tuple[str, ...]) -> tuple[list[_Node], str, list[_Tok], int]:
        """Nodes up to an action starting with one of ``ends`` (its word, rest, line)."""
        out: list[_Node] = []
        while self.pos < len(self.items):
            kind, value, line = self.items[self.pos]
            self.pos += 1
            if kind == "text":
                out.append(_Text(str(value)))
                continue
            toks: list[_Tok] = value  # type: ignore[assignment]
            if not toks:
                raise self.error(line, "missing value for command")
            word = toks[0].text if toks[0].kind == "ident" else ""
            if word in ends:
                return out, word, toks[1:], line
            if word in ("end", "else"):
                raise self.error(line, f"unexpected {{{{{word}}}}}")
            node = self.control(word, toks[1:], line) if word in _CONTROL else None
            if node is None:
                node = _Action(self.pipeline(toks, line, decl_ok=True))
            node.line = line
            out.append(node)
        if ends:
            raise self.error(self.items[-1][2] if self.items else 1, "unexpected EOF")
        return out, "", [], 0

    def control(self, word: str, rest: list[_Tok], line: int) -> _Node:
        if word in ("break", "continue"):
            if rest:
                raise self.error(line, f"unexpected {rest[0].text!r} in {{{{{word}}}}}")
            if not self.loops:
                raise self.error(line, f"{{{{{word}}}}} outside {{{{range}}}}")
            return _Loop(word)
        if word in ("define", "template", "block"):
            raise self.error(line, f"{{{{{word}}}}} is not supported")
        return self.branch(word, rest, line)

    def branch(self, word: str, rest: list[_Tok], line: int) -> _Node:
        mark = len(self.vars)
        pipe = self.pipeline(rest, line, decl_ok=True, range_decl=word == "range")
        self.loops += word == "range"
        body, end, tail, end_line = self.parse_list(("end", "else"))
        self.loops -= word == "range"
        other: list[_Node] = []
        if end == "else":
            if tail and tail[0].text in ("if", "with") and tail[0].kind == "ident":
                nested = self.branch(tail[0].text, tail[1:], end_line)  # closes at our end
                nested.line = end_line
                other = [nested]
            else:
                if tail:
                    raise self.error(end_line, f"unexpected {tail[0].text!r} in else")
                other, _, _, _ = self.parse_list(("end",))
        elif tail:
            raise self.error(end_line, f"unexpected {tail[0].text!r} in end")
        del self.vars[mark:]
        return _Branch(word, pipe, body, other)

    def pipeline(
        self, toks: list[_Tok], line: int, *, decl_ok: bool = False, range_decl: bool = False
    ) -> _Pipe:
        src = " ".join(t.text for t in toks)
        decls, assign, toks = self.declarations(toks, line, decl_ok, range_decl)
        cmds: list[list[_Node]] = []
        cmd: list[_Node] = []
        i = 0
        while i < len(toks):
            tok = toks[i]
            if tok.text == "|" and tok.kind == "punct":
                if not cmd:
                    raise self.error(line, "missing value for command")
                cmds.append(cmd)
                cmd = []
                i += 1
                continue
            node, i = self.operand(toks, i, line)
            cmd.append(node)
        if not cmd:
            raise self.error(line, "missing value for command" if cmds or not decls else
                             f"missing value for {src}")  # fmt: skip
        cmds.append(cmd)
        for stage, c in enumerate(cmds[1:], start=2):
            if isinstance(c[0], _Lit | _Dot):
                raise self.error(line, f"non executable command in pipeline stage {stage}")
        self.vars.extend(d for d in decls if not assign)
        return _Pipe(decls, assign, cmds, src)

    def declarations(
        self, toks: list[_Tok], line: int, decl_ok: bool, range_decl: bool
    ) -> tuple[list[str], bool, list[_Tok]]:
        names: list[_Tok] = []
        i = 0
        while i < len(toks) and toks[i].kind == "var":
            names.append(toks[i])
            nxt = toks[i + 1] if i + 1 < len(toks) else None
            if nxt is not None and nxt.text == "," and range_decl and len(names) == 1:
                i += 2
                continue
            if nxt is not None and (nxt.kind == "decl" or nxt.text == "=") and decl_ok:
                assign = nxt.text == "="
                if assign and names[0].text not in self.vars:
                    raise self.error(line, f"undefined variable: {names[0].text}")
                return [n.text for n in names], assign, toks[i + 2 :]
            break
        if len(names) > 1:
            raise self.error(line, "too many declarations")
        return [], False, toks

    def operand(self, toks: list[_Tok], i: int, line: int) -> tuple[_Node, int]:
        tok = toks[i]
        node: _Node
        if tok.kind == "field":
            node, i = _Field(None, [tok.text[1:]]), i + 1
        elif tok.kind == "dot":
            node, i = _Dot(), i + 1
        elif tok.kind == "var":
            if tok.text not in self.vars:
                raise self.error(line, f"undefined variable {tok.text!r}")
            node, i = _Var(tok.text), i + 1
        elif tok.kind == "ident":
            node, i = self.ident(tok.text, line), i + 1
        elif tok.text == "(":
            depth, j = 1, i + 1
            while j < len(toks) and depth:
                depth += {"(": 1, ")": -1}.get(toks[j].text if toks[j].kind == "punct" else "", 0)
                j += 1
            if depth:
                raise self.error(line, "unclosed left paren")
            node, i = _Sub(self.pipeline(toks[i + 1 : j - 1], line)), j
        elif tok.kind in ("str", "raw", "char", "num"):
            try:
                node, i = _Lit(gofuncs.literal(tok.kind, tok.text)), i + 1
            except ValueError as exc:
                raise self.error(line, str(exc)) from None
        else:
            raise self.error(line, f"unexpected {tok.text!r} in operand")
        names: list[str] = []
        while i < len(toks) and toks[i].kind == "field" and not toks[i].spaced:
            if isinstance(node, _Lit | _Func):
                raise self.error(line, f"unexpected {toks[i].text!r} in operand")
            names.append(toks[i].text[1:])
            i += 1
        if names:
            node = _Field(node, names) if not isinstance(node, _Field) else _Field(
                node.base, node.names + names
            )  # fmt: skip
        return node, i

    def ident(self, name: str, line: int) -> _Node:
        if name in ("true", "false"):
            return _Lit(name == "true")
        if name == "nil":
            return _Lit(None)
        if name in _CONTROL or name in ("end", "else"):
            raise self.error(line, f"unexpected <{name}> in command")
        if name not in self.funcs:
            raise self.error(line, f'function "{name}" not defined')
        return _Func(name)


_CONTROL = ("if", "range", "with", "break", "continue", "define", "template", "block")


# --- execution ------------------------------------------------------------------------


class _Stop(Exception):
    """``{{break}}`` or ``{{continue}}`` leaving the loop's body."""

    def __init__(self, word: str) -> None:
        super().__init__(word)
        self.word = word


_NONE: Any = object()  # no value piped in from the previous command


class Template:
    """A parsed template; :meth:`execute` it on JSON-shaped data as often as needed."""

    def __init__(self, src: str, funcs: Mapping[str, Callable[..., Any]] | None = None) -> None:
        self.src = src
        self.funcs = {**gofuncs.FUNCS, **(funcs or {})}
        self.nodes, _, _, _ = _Parser(src, self.funcs).parse_list(())

    def root_fields(self) -> set[str]:
        """The first names of the fields read from the data itself (``.A`` where dot is
        still the data, ``$.A`` anywhere), so a caller can refuse unknown ones early."""
        found: set[str] = set()
        _root_fields(self.nodes, True, found)
        return found

    def execute(self, data: Any) -> str:
        run = _Exec(self.funcs, data)
        run.run(self.nodes, data)
        return "".join(run.out)


def _root_fields(nodes: list[_Node], at_root: bool, found: set[str]) -> None:
    def pipe(p: _Pipe) -> None:
        for cmd in p.cmds:
            for arg in cmd:
                operand(arg)

    def operand(arg: _Node) -> None:
        if isinstance(arg, _Field):
            if (arg.base is None and at_root) or (
                isinstance(arg.base, _Var) and arg.base.name == "$"
            ):
                found.add(arg.names[0])
            if arg.base is not None:
                operand(arg.base)
        elif isinstance(arg, _Sub):
            pipe(arg.pipe)

    for node in nodes:
        if isinstance(node, _Action):
            pipe(node.pipe)
        elif isinstance(node, _Branch):
            pipe(node.pipe)
            _root_fields(node.body, at_root and node.kind == "if", found)
            _root_fields(node.other, at_root, found)


def parse(src: str, funcs: Mapping[str, Callable[..., Any]] | None = None) -> Template:
    """The template, or :class:`TemplateError` worded as Go's parser words it."""
    return Template(src, funcs)


def _describe(node: _Node) -> str:
    if isinstance(node, _Field):
        base = "" if node.base is None else _describe(node.base)
        return base + "".join(f".{n}" for n in node.names)
    if isinstance(node, _Var):
        return node.name
    if isinstance(node, _Func):
        return node.name
    if isinstance(node, _Sub):
        return f"({node.pipe.src})"
    if isinstance(node, _Lit):
        return gofuncs.to_json(node.value)
    return "."


def _call_args(values: list[Any], final: Any) -> list[Any]:
    """A function's arguments, the piped value last; a missing key becomes nil, as Go
    passes the zero of the parameter's type (``interface{}``) for an invalid value."""
    out = values if final is _NONE else [*values, final]
    return [None if v is NO_VALUE else v for v in out]


class _Exec:
    def __init__(self, funcs: Mapping[str, Callable[..., Any]], root: Any) -> None:
        self.funcs = funcs
        self.vars: list[tuple[str, Any]] = [("$", root)]
        self.out: list[str] = []
        self.line = 1

    def error(self, at: str, msg: str) -> TemplateError:
        return TemplateError(f'template: :{self.line}: executing "" at <{at}>: {msg}')

    def run(self, nodes: list[_Node], dot: Any) -> None:
        for node in nodes:
            self.line = node.line or self.line
            if isinstance(node, _Text):
                self.out.append(node.text)
            elif isinstance(node, _Action):
                value = self.pipe(node.pipe, dot)
                if not node.pipe.decls:
                    self.out.append(gofuncs.text(value))
            elif isinstance(node, _Branch):
                mark = len(self.vars)
                self.branch(node, dot)
                del self.vars[mark:]
            elif isinstance(node, _Loop):
                raise _Stop(node.word)

    def scoped(self, nodes: list[_Node], dot: Any) -> None:
        mark = len(self.vars)
        try:
            self.run(nodes, dot)
        finally:
            del self.vars[mark:]

    def branch(self, node: _Branch, dot: Any) -> None:
        if node.kind == "range":
            self.range(node, dot)
            return
        value = self.pipe(node.pipe, dot)
        if gofuncs.truth(value):
            self.scoped(node.body, value if node.kind == "with" else dot)
        else:
            self.scoped(node.other, dot)

    def range(self, node: _Branch, dot: Any) -> None:
        value = self.pipe(node.pipe, dot, declare=False)
        items: list[tuple[Any, Any]]
        if value is None or value is NO_VALUE:
            items = []
        elif isinstance(value, GoMap):
            items = [(k, value[k]) for k in sorted(value)]
        elif isinstance(value, list | tuple):
            items = list(enumerate(value))
        elif isinstance(value, int) and not isinstance(value, bool):
            items = [(i, i) for i in range(value)]
        else:
            shown = gofuncs.sprint_value(value)
            raise self.error(node.pipe.src, f"range can't iterate over {shown}")
        if not items:
            self.scoped(node.other, dot)
            return
        for key, elem in items:
            mark = len(self.vars)
            names = node.pipe.decls
            self.vars.extend(zip(names, [elem] if len(names) == 1 else [key, elem], strict=False))
            try:
                self.run(node.body, elem)
            except _Stop as stop:
                if stop.word == "break":
                    break
            finally:
                del self.vars[mark:]

    def pipe(self, pipe: _Pipe, dot: Any, *, declare: bool = True) -> Any:
        value = _NONE
        for cmd in pipe.cmds:
            value = self.command(cmd, dot, value)
        if declare and pipe.decls:
            if pipe.assign:
                at = max(i for i, (n, _) in enumerate(self.vars) if n == pipe.decls[0])
                self.vars[at] = (pipe.decls[0], value)
            else:
                self.vars.append((pipe.decls[0], value))
        return value

    def command(self, cmd: list[_Node], dot: Any, final: Any) -> Any:
        first, args = cmd[0], cmd[1:]
        if isinstance(first, _Func):
            return self.call(first.name, args, dot, final)
        if isinstance(first, _Field):
            return self.field(first, args, dot, final)
        if isinstance(first, _Lit) and first.value is None:
            raise self.error("nil", "nil is not a command")
        if args or final is not _NONE:
            what = _describe(first)
            raise self.error(what, f"can't give argument to non-function {what}")
        return self.arg(first, dot)

    def arg(self, node: _Node, dot: Any) -> Any:
        if isinstance(node, _Dot):
            return dot
        if isinstance(node, _Lit):
            return node.value
        if isinstance(node, _Var):
            return next(v for n, v in reversed(self.vars) if n == node.name)
        if isinstance(node, _Sub):
            return self.pipe(node.pipe, dot)
        if isinstance(node, _Field):
            return self.field(node, [], dot, _NONE)
        if isinstance(node, _Func):
            return self.call(node.name, [], dot, _NONE)
        raise self.error(_describe(node), "can't evaluate")

    def field(self, node: _Field, args: list[_Node], dot: Any, final: Any) -> Any:
        value = dot if node.base is None else self.arg(node.base, dot)
        for i, name in enumerate(node.names):
            last = i == len(node.names) - 1
            value = self.lookup(node, value, name, args if last else [], final if last else _NONE)
        return value

    def lookup(self, node: _Field, value: Any, name: str, args: list[_Node], final: Any) -> Any:
        at = _describe(node)
        if value is NO_VALUE:
            return NO_VALUE
        if value is None:
            raise self.error(at, f"nil pointer evaluating interface {{}}.{name}")
        if isinstance(value, GoMap):
            found = value.get(name, NO_VALUE)
        elif isinstance(value, Mapping):
            if name not in value:
                raise self.error(at, f'map has no entry for key "{name}"')
            found = value[name]
        else:
            raise self.error(at, f"can't evaluate field {name} in type {gofuncs.go_type(value)}")
        if callable(found):
            vals = _call_args([self.arg(a, value) for a in args], final)
            try:
                return found(*vals)
            except (TypeError, gofuncs.FuncError) as exc:
                raise self.error(at, f"error calling {name}: {exc}") from None
        if args or final is not _NONE:
            raise self.error(at, f"{name} is not a method but has arguments")
        return found

    def call(self, name: str, args: list[_Node], dot: Any, final: Any) -> Any:
        at = " ".join([name, *(_describe(a) for a in args)])
        if name in ("and", "or") and len(args) + (final is not _NONE) >= 1:
            value = _NONE
            for a in args:
                value = self.arg(a, dot)
                if gofuncs.truth(value) is (name == "or"):
                    return value
            return value if final is _NONE else final
        vals = _call_args([self.arg(a, dot) for a in args], final)
        try:
            gofuncs.arity_ok(name, len(vals))
        except gofuncs.FuncError as exc:
            raise self.error(at, str(exc)) from None
        try:
            return self.funcs[name](*vals)
        except (TypeError, gofuncs.FuncError) as exc:
            raise self.error(at, f"error calling {name}: {exc}") from None
