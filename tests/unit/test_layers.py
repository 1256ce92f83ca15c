"""The layering rules from docs/architecture.md, enforced on the source text."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import _graph

import ctrexec

PKG = Path(ctrexec.__file__).parent


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def _hand_written() -> list[Path]:
    return [p for p in PKG.rglob("*.py") if "_api" not in p.relative_to(PKG).parts]


def test_only_rpc_imports_grpc() -> None:
    offenders = [
        str(p.relative_to(PKG))
        for p in _hand_written()
        if p.name not in ("_rpc.py", "_rpcserver.py")
        and any(
            m == "grpc" or m.startswith("grpc.") or m.endswith("_pb2_grpc") for m in _imports(p)
        )
    ]
    assert offenders == []


def test_cli_uses_no_private_layers() -> None:
    offenders = []
    for p in (PKG / "cli").rglob("*.py"):
        for m in _imports(p):
            if m.startswith(("ctrexec._rpc", "ctrexec._api")):
                offenders.append(f"{p.name}: {m}")
    assert offenders == []


#: What ``nomad/`` may import from the package besides ``ctrexec`` itself and its own
#: modules. The generated stubs are its wire: Nomad's driver and base services, go-plugin's
#: controller and stdio, gRPC health and ``google.rpc.Status`` (the plugin's server seam,
#: the one place that speaks them); ``ctrexec.defaults`` is the import-free module of
#: shared defaults (the plugin's socket scheme, which doctor sweeps too), read before
#: anything heavy loads.
NOMAD_MAY_IMPORT = (
    "ctrexec._api.nomad.",
    "ctrexec._api.goplugin.",
    "ctrexec._api.health.",
    "ctrexec._api.google.rpc.",
    "ctrexec.defaults",
    "ctrexec.nomad",
)


def test_nomad_uses_only_the_public_api() -> None:
    """The Nomad driver is built on what ``ctrexec`` exports, as any scheduler would be."""
    offenders = []
    for p in sorted((PKG / "nomad").rglob("*.py")):
        tree = ast.parse(p.read_text(), filename=str(p))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules = [node.module]
            else:
                continue
            for m in modules:
                if m == "ctrexec" or not m.startswith("ctrexec."):
                    continue
                if not any(m == a.rstrip(".") or m.startswith(a) for a in NOMAD_MAY_IMPORT):
                    offenders.append(f"{p.name}: {m}")
    assert offenders == []


def test_public_api_is_exported() -> None:
    assert ctrexec.__all__, "ctrexec.__all__ must list the public API"
    missing = [name for name in ctrexec.__all__ if not hasattr(ctrexec, name)]
    assert missing == []
    assert len(set(ctrexec.__all__)) == len(ctrexec.__all__)


def test_modules_stay_small() -> None:
    big = [
        f"{p.relative_to(PKG)}: {n}"
        for p in _hand_written()
        if (n := len(p.read_text().splitlines())) > 650
    ]
    assert big == []


def _rel(p: Path) -> str:
    return str(p.relative_to(PKG))


def _tree(p: Path) -> ast.AST:
    return ast.parse(p.read_text(), filename=str(p))


def test_only_linux_calls_libc() -> None:
    """One libc binding: ctypes (and find_library, which forks ldconfig) only in _linux."""
    offenders = [
        _rel(p)
        for p in _hand_written()
        if p.name != "_linux.py" and any(m.split(".")[0] == "ctypes" for m in _imports(p))
    ]
    assert offenders == []
    assert "find_library" not in _attributes(PKG / "_linux.py")


def _attributes(p: Path) -> set[str]:
    return {n.attr for n in ast.walk(_tree(p)) if isinstance(n, ast.Attribute)}


def test_one_root_confined_reader() -> None:
    """Resolving a path inside an untrusted root takes O_PATH; only _linux does that."""
    offenders = [_rel(p) for p in _hand_written() if "O_PATH" in _attributes(p)]
    assert offenders == ["_linux.py"]


def test_one_timestamp_converter() -> None:
    """Protobuf Timestamps are read in one place, so unset (zero) means None everywhere."""
    readers = {"nanos", "ToDatetime", "FromDatetime", "ToNanoseconds", "FromNanoseconds"}
    offenders = [_rel(p) for p in _hand_written() if readers & _attributes(p)]
    assert offenders == ["containerd/_proto.py"]


def test_only_the_tasks_module_calls_the_tasks_service() -> None:
    """The daemon's teardown (and anything else) goes through containerd/tasks.py."""
    offenders = [
        _rel(p)
        for p in _hand_written()
        if p.name != "tasks.py" and any(m.endswith("tasks.v1.tasks_pb2") for m in _imports(p))
    ]
    assert offenders == []


def _oci_modules() -> list[Path]:
    return sorted((PKG / "oci").glob("*.py"))


def test_oci_imports_only_errors_and_itself() -> None:
    offenders = [
        f"{p.name}: {m}"
        for p in _oci_modules()
        for m in _imports(p)
        if m.startswith("ctrexec") and not m.startswith(("ctrexec.errors", "ctrexec.oci"))
    ]
    assert offenders == []


#: Calls that read files or directories; oci/ gets file contents from its callers.
_READ_CALLS = {"open", "fdopen", "read", "readlink", "listdir", "scandir", "walk"}
_READ_METHODS = {"read_text", "read_bytes", "open", "iterdir", "glob", "rglob"}


def _package_data(node: ast.AST) -> bool:
    """``resources.files(...)...``: the package's own data file, not the host's."""
    while isinstance(node, ast.Attribute | ast.Call):
        node = node.func if isinstance(node, ast.Call) else node.value
        if isinstance(node, ast.Attribute) and node.attr == "files":
            return isinstance(node.value, ast.Name) and node.value.id == "resources"
    return False


def _file_reads(source: str, name: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        if isinstance(fn, ast.Name) and fn.id == "open":
            found.append(f"{name}:{node.lineno} open()")
        elif isinstance(fn, ast.Attribute):
            on_os = isinstance(fn.value, ast.Name) and fn.value.id == "os"
            if (on_os and fn.attr in _READ_CALLS) or (
                fn.attr in _READ_METHODS and not on_os and not _package_data(fn.value)
            ):
                found.append(f"{name}:{node.lineno} {fn.attr}()")
    return found


def test_oci_reads_no_files() -> None:
    """The spec builders are pure: passwd, group and /proc come in as text."""
    assert [r for p in _oci_modules() for r in _file_reads(p.read_text(), p.name)] == []


def test_the_file_read_rule_sees_reads() -> None:
    sample = (
        "open('/etc/passwd')\n"
        "os.fdopen(fd)\n"
        "Path('/proc/self/status').read_text()\n"
        "resources.files('ctrexec.oci').joinpath('x.json').read_text()\n"
        "os.path.join('a', 'b')\n"
    )
    assert _file_reads(sample, "s") == ["s:1 open()", "s:2 fdopen()", "s:3 read_text()"]


#: The layers, low to high. A module imports only from lower layers, or from its own
#: package; two packages of one layer never import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "ctrexec._version",
        "ctrexec.defaults",
        "ctrexec.errors",
        "ctrexec.flocks",
        "ctrexec.paths",
        "ctrexec.procfs",
    ),
    (
        "ctrexec.ids",
        "ctrexec.labels",
        "ctrexec._linux",
        "ctrexec.inflight",
        "ctrexec.owners",
        "ctrexec.placement",
    ),
    ("ctrexec._rpc", "ctrexec.oci"),
    ("ctrexec.containerd", "ctrexec.net"),
    ("ctrexec.logs", "ctrexec.images"),
    ("ctrexec.tasks",),
    ("ctrexec.groups",),
    ("ctrexec.doctor", "ctrexec.preloading"),
    ("ctrexec.cli", "ctrexec.nomad", "ctrexec.testing"),
)

#: Inside these packages, a module imports only the modules listed before it.
ORDER: dict[str, tuple[str, ...]] = {
    "ctrexec.tasks": (
        "envfile",
        "fields",
        "requestsize",
        "restarts",
        "config",
        "reports",
        "output",
        "logkeeper",
        "supervised",
        "runs",
        "users",
        "spec",
        "files",
        "records",
        "copyarchive",
        "copying",
        "volumes",
        "health",
        "info",
        "procs",
        "implicitnet",
        "publishing",
        "grouplock",
        "groupnet",
        "stdio",
        "execspec",
        "waiting",
        "events",
        "runwait",
        "stale",
        "teardown",
        "control",
        "hostside",
        "execing",
        "retiring",
        "rename",
        "executor",
        "aiologs",
        "aio",
        "nomadtasks",
        "cgroupfs",
    ),
    "ctrexec.groups": (
        "spec",
        "missing",
        "outage",
        "changes",
        "updown",
        "presence",
        "backoff",
        "supervisor",
    ),
}


def _place(module: str) -> tuple[int, str] | None:
    for rank, layer in enumerate(LAYERS):
        for member in layer:
            if module == member or module.startswith(f"{member}."):
                return rank, member
    return None


def test_every_module_has_a_layer() -> None:
    assert [m for m in _graph.hand_written() if m != "ctrexec" and _place(m) is None] == []


def test_imports_go_down_the_layers() -> None:
    upward = []
    for module, deps in _graph.graph().items():
        here = _place(module)
        for dep in sorted(deps):
            there = _place(dep)
            if (
                here
                and there
                and (there[0] > here[0] or (there[0] == here[0] and there[1] != here[1]))
            ):
                upward.append(f"{module} -> {dep}")
    assert sorted(upward) == []


def test_no_import_cycles() -> None:
    """Counting imports inside functions and under TYPE_CHECKING (see ``_graph``)."""
    assert _graph.cycles(_graph.graph()) == []


def test_ordered_packages_list_every_module() -> None:
    for package, order in ORDER.items():
        inside = {m for m in _graph.hand_written() if m.startswith(f"{package}.")}
        assert sorted(order) == sorted(m.rpartition(".")[2] for m in inside), package


def test_ordered_packages_import_only_earlier_modules() -> None:
    late = []
    edges = _graph.graph()
    for package, order in ORDER.items():
        rank = {f"{package}.{name}": i for i, name in enumerate(order)}
        for module, mine in rank.items():
            late += [
                f"{module} -> {d}" for d in sorted(edges.get(module, ())) if rank.get(d, -1) > mine
            ]
    assert late == []


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # the parent is a module, not a package
        return False


def test_no_private_name_crosses_modules() -> None:
    """``from ctrexec.x import _y`` couples to what x may change freely; private
    submodules (``from ctrexec import _rpc``) are modules, not names, and are allowed."""
    offenders = []
    for p in _hand_written():
        for node in ast.walk(ast.parse(p.read_text(), filename=str(p))):
            if not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ctrexec")):
                continue
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                dunder = alias.name.startswith("__") and alias.name.endswith("__")  # __version__
                if alias.name.startswith("_") and not dunder and not _is_module(full):
                    offenders.append(f"{p.relative_to(PKG)}: {full}")
    assert offenders == []


def _in_cli(module: str) -> bool:
    return module == "ctrexec.cli" or module.startswith("ctrexec.cli.")


def _cli_internal_imports() -> dict[str, list[str]]:
    """Internal module → the ``cli/`` modules that import it, in every form (module
    level, inside a function, under ``TYPE_CHECKING``; see ``_graph``). The package root
    and ``cli/``'s own modules are not internal; nor is a public name that shares its
    module's name (``from ctrexec import doctor`` is the function)."""
    modules = _graph.hand_written()
    public = {f"ctrexec.{name}" for name in ctrexec.__all__}
    used: dict[str, set[str]] = {}
    for module, path in modules.items():
        if _in_cli(module):
            for name in _graph.imported(path.read_text()) - public:
                dep = _graph.target(name, modules)
                if dep and dep != "ctrexec" and not _in_cli(dep):
                    used.setdefault(dep, set()).add(module)
    return {dep: sorted(by) for dep, by in sorted(used.items())}


def test_cli_uses_only_the_public_api() -> None:
    """``cli/`` is built on what ``ctrexec`` exports, as a scheduler would be: a front
    end that needs more gives the library a public call (in ``ctrexec.__all__``, typed,
    documented), so the rule about a task's fate lives where every caller gets it."""
    assert _cli_internal_imports() == {}, (
        "cli/ imports internal modules (module: the cli/ modules that do). Import the "
        "name from `ctrexec` instead; if ctrexec exports nothing for it, give the library "
        "a public call"
    )


def test_the_cli_rule_sees_internal_imports() -> None:
    """The rule above reads every form of import (here, one inside a function)."""
    text = "def f() -> None:\n    from ctrexec.tasks import executor\n"
    modules = _graph.hand_written()
    found = {_graph.target(n, modules) for n in _graph.imported(text)}
    assert "ctrexec.tasks.executor" in found


def test_cli_views_import_no_verb() -> None:
    """``cli/views`` formats values for the verbs; the verbs import it, never the other
    way (it sat a layer below ``cli/`` before it moved into it)."""
    offenders = [
        f"{module} -> {dep}"
        for module, deps in sorted(_graph.graph().items())
        if module.startswith("ctrexec.cli.views")
        for dep in sorted(deps)
        if _in_cli(dep) and not dep.startswith("ctrexec.cli.views")
    ]
    assert offenders == []


#: What only ``cli/groups.py`` may drive: group files and group up/down/ps.
_GROUP_FILE_MODULES = ("ctrexec.groups.spec", "ctrexec.groups.updown")


def test_cli_families_do_not_reach_into_groups() -> None:
    """Only ``cli/groups.py`` drives :mod:`ctrexec.groups.spec` and
    :mod:`ctrexec.groups.updown`; other commands use the executor's API (``run -p``'s
    implicit group through ``Executor.create(network=...)``), so the group file format
    can change without touching them."""
    offenders = [
        f"{p.name}: {m}"
        for p in (PKG / "cli").rglob("*.py")
        if p.name != "groups.py"
        for m in sorted(_imports(p))
        if m in _GROUP_FILE_MODULES or m.startswith(tuple(f"{x}." for x in _GROUP_FILE_MODULES))
    ]
    assert offenders == []


def test_one_name_per_class() -> None:
    """Two classes of one name in different modules read alike in every signature
    that uses them; each hand-written class name is unique across the package."""
    seen: dict[str, list[str]] = {}
    for p in _hand_written():
        for node in ast.walk(ast.parse(p.read_text(), filename=str(p))):
            if isinstance(node, ast.ClassDef):
                seen.setdefault(node.name, []).append(str(p.relative_to(PKG)))
    shared = {name: sorted(where) for name, where in seen.items() if len(where) > 1}
    assert shared == {}


def test_functions_stay_short() -> None:
    """A function over 60 lines does more than one thing; split it by meaning."""
    long = [
        f"{p.relative_to(PKG)}:{node.lineno} {node.name} ({size} lines)"
        for p in _hand_written()
        for node in ast.walk(ast.parse(p.read_text(), filename=str(p)))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (size := (node.end_lineno or node.lineno) - node.lineno + 1) > 60
    ]
    assert long == []


def test_the_template_engine_is_a_leaf() -> None:
    """``gotemplate``/``gofuncs`` import only the standard library and ``errors`` (by its
    public names too, which load nothing else): the CLI parses a ``--format`` before it
    connects, and nothing heavy comes with it."""
    public_errors = {
        f"ctrexec.{name}"
        for name, (module, _) in ctrexec._MODULE_OF.items()
        if module == "ctrexec.errors"
    }
    offenders = [
        f"{name}: {m}"
        for name in ("gotemplate.py", "gofuncs.py")
        for m in _imports(PKG / "cli" / "views" / name)
        if m.startswith("ctrexec")
        and m not in ("ctrexec", "ctrexec.cli.views", "ctrexec.cli.views.gofuncs", "ctrexec.errors")
        and m not in public_errors
        and not m.startswith(("ctrexec.cli.views.gofuncs.", "ctrexec.errors."))
    ]
    assert offenders == []


def test_the_cycle_check_sees_cycles() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _graph.cycles(edges) == [["a", "b", "c"]]


def test_the_graph_counts_function_and_type_checking_imports() -> None:
    sample = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from ctrexec.tasks.executor import Executor\n"
        "def f():\n"
        "    from ctrexec.groups import implicit\n"
        "    import ctrexec.net.netns\n"
    )
    assert _graph.imported(sample) == {
        "ctrexec.tasks.executor.Executor",
        "ctrexec.groups.implicit",
        "ctrexec.net.netns",
    }


def _function_imports(source: str) -> list[int]:
    """Lines of import statements inside functions that no comment explains: a comment on
    a line of their run of consecutive imports, or on the line just above the run."""
    lines = source.splitlines()
    bare = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        spans = [
            (node.lineno, node.end_lineno or node.lineno)
            for node in ast.walk(fn)
            if isinstance(node, ast.Import | ast.ImportFrom)
        ]
        covered = {line for start, end in spans for line in range(start, end + 1)}
        for start, end in spans:
            above, below = start - 1, end + 1
            while above >= 1 and (above in covered or not lines[above - 1].strip()):
                above -= 1
            while below <= len(lines) and (below in covered or not lines[below - 1].strip()):
                below += 1
            if not any("#" in line for line in lines[max(above - 1, 0) : below - 1]):
                bare.append(start)
    return sorted(set(bare))


def test_imports_inside_functions_say_why() -> None:
    """An import inside a function defers a start-up cost, and its comment says which.
    ``cli/`` is exempt as a whole: its package docstring states the one reason for all."""
    offenders = [
        f"{p.relative_to(PKG)}:{line}"
        for name, p in _graph.hand_written().items()
        if not name.startswith("ctrexec.cli")
        for line in _function_imports(p.read_text())
    ]
    assert offenders == []


def test_the_import_comment_rule_sees_bare_imports() -> None:
    sample = (
        "def f():\n"
        "    import json\n"
        "    return json\n"
        "def g():\n"
        "    # grpc only when connected\n"
        "    import grpc\n"
        "    import attrs\n"
        "    return grpc, attrs\n"
        "def h():\n"
        "    import os  # cheap\n"
    )
    assert _function_imports(sample) == [2]
