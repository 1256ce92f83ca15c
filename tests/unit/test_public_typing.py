"""A user's ``mypy --strict`` sees ctrexec's public names with their real types, with
ctrexec found the way a user's mypy finds it: installed, not from the source tree.

mypy reads ``.pth`` files for paths but does not run import hooks, and setuptools'
default editable install is an import hook (``__editable___*_finder.py``): mypy
then says ``Cannot find implementation or library stub for module named
"ctrexec"``. So scripts/setup installs with ``editable_mode=compat`` (a path in a
``.pth``; see docs/library.md). Each test runs mypy from a directory of its own, with
no MYPYPATH: once against this venv's install, once against a wheel built from this
tree (which must carry ``py.typed``). A plain ``pip install -e .`` is how many
contributors install, and it says nothing about the code: against such an install the
first test gives mypy what compat mode would, a venv whose ``.pth`` names this tree.
"""

from __future__ import annotations

import ast
import importlib
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest
from _docblocks import PYTHON, parse
from _usercode import venv_reading

import ctrexec

ROOT = Path(ctrexec.__file__).parent.parent

# ``wrong`` is wrong on purpose: had the lazy exports made the names ``Any``, mypy would
# accept it, and ``--strict`` would instead flag every Any that leaks into a return.
_USER = textwrap.dedent(
    """\
    from __future__ import annotations
    import threading
    import ctrexec
    from pathlib import Path
    from ctrexec import (
        DEFAULT_NAMESPACE, Client, DaemonPaths, Executor, Groups, HandleMismatch, Networks,
        NotFound, StrPath, Supervisor, TaskConfig, TaskHandle, TaskInfo, create_netns,
        export_archive, import_archive, inspect_netns, load_group_file, read_logs,
        remove_netns,
    )

    def start(address: str) -> TaskHandle:
        with Client.connect(address, namespace=DEFAULT_NAMESPACE) as client:
            return Executor(client).start_task(TaskConfig(name="web", image="busybox"))

    def name_of(handle: ctrexec.TaskHandle) -> str:
        return handle.id

    def wrong(config: TaskConfig) -> int:
        return config.name

    def gone(err: Exception) -> bool:
        return isinstance(err, NotFound | ctrexec.ConnectError | HandleMismatch)

    def old_exit(ex: Executor, handle: TaskHandle) -> int | None:
        info: TaskInfo = ex.recover(handle)
        return info.exit_code if info.superseded else None

    def addresses(ex: Executor, task: str) -> list[str]:
        return [a.cidr for a in ex.inspect(task).addresses or ()]

    def allocation(name: str) -> list[str]:
        ns = create_netns(name, exist_ok=True)
        try:
            return [a.address for a in inspect_netns(ns.path).addresses]
        finally:
            remove_netns(ns.path)

    def lines(info: TaskInfo) -> list[str]:
        driver = info.config.log_driver if info.config else "json-file"
        return [e.message for e in read_logs(info.log_path, driver=driver, tail=10)]

    def group_of(ex: Executor) -> list[str]:
        return [i.id for i in Groups(ex, Networks()).ps("web")]

    def supervise(ex: Executor, stop: threading.Event) -> int:
        sup = Supervisor(ex)
        sup.run(stop)
        return sup.restarts

    def paths(client: Client, alloc: str, where: StrPath) -> list[str]:
        for log_dir in (f"/var/lib/sched/{alloc}/logs", Path("/var/lib/sched", alloc, "logs")):
            ex = Executor(client, log_dir=log_dir, state_dir=log_dir, files_dir=log_dir)
            ex.start_task(TaskConfig(name=alloc, image="busybox", log_dir=log_dir))
            Supervisor(ex, lock_dir=log_dir)
            ctrexec.is_supervised(client, log_dir)
            DaemonPaths(root=log_dir, state=log_dir)
            DaemonPaths.under(log_dir)
            load_group_file(log_dir)
            import_archive(client, log_dir)
            Networks(cache_dir=log_dir)
            read_logs(log_dir)
        TaskConfig(name=alloc, image="busybox", stdout_path=Path("/f"), stderr_path="/f")
        return export_archive(client, ["busybox"], where)
    """
)
_WRONG_LINE = _USER.splitlines().index("    return config.name") + 1
_EXPECTED = [
    f'{_WRONG_LINE}: error: Incompatible return value type (got "str", expected "int")'
    "  [return-value]"
]


def _mypy(tmp_path: Path, *flags: str) -> list[str]:
    pytest.importorskip("mypy")
    work = tmp_path / "user"
    work.mkdir()
    (work / "user.py").write_text(_USER)
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
         "--cache-dir", str(tmp_path / "cache"), *flags, "user.py"],
        check=False, capture_output=True, text=True, cwd=work, env=env, timeout=300,
    )  # fmt: skip
    errors = [line.split(":", 1)[1] for line in out.stdout.splitlines() if ": error:" in line]
    assert errors == _EXPECTED, out.stdout + out.stderr
    return errors


def test_mypy_strict_on_a_user_file_against_this_venvs_install(tmp_path: Path) -> None:
    """With an import hook (``pip install -e .``, setuptools' default), mypy gets a venv
    that names the tree the hook loads ctrexec from, as compat mode's .pth would."""
    hooks = list(Path(sysconfig.get_paths()["purelib"]).glob("__editable___ctrexec_*finder.py"))
    if not hooks:
        _mypy(tmp_path)
        return
    _mypy(tmp_path, "--python-executable", str(venv_reading(tmp_path, ROOT)))


def test_mypy_strict_on_a_user_file_against_a_built_wheel(tmp_path: Path) -> None:
    """The wheel carries py.typed; mypy, given a Python that has only it (and the
    dependencies, from this venv), checks the user's file against it."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "ctrexec", src / "ctrexec", ignore=ignore)
    shutil.copytree(ROOT / "bin", src / "bin")  # pyproject's script-files
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "--no-index", "-w", str(tmp_path / "dist"), str(src)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("ctrexec-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        assert "ctrexec/py.typed" in z.namelist()
        z.extractall(site)
    _mypy(tmp_path, "--python-executable", str(venv_reading(tmp_path, site)))


def test_mypy_strict_on_every_python_block_of_the_library_docs(tmp_path: Path) -> None:
    """docs/library.md is a scheduler author's first program, typed: each python block
    (its tutorial, the review's example rewritten) is a module of its own, checked with
    ``--strict`` against this tree as an install gives it (no MYPYPATH, no source
    path), so a block with a wrong call or a name mypy cannot see fails here."""
    pytest.importorskip("mypy")
    doc = ROOT / "docs" / "library.md"
    blocks = [b for b in parse(doc.read_text(), doc) if b.lang in PYTHON]
    assert any("def run_alloc(" in b.code for b in blocks)
    work = tmp_path / "docs"
    work.mkdir()
    names = []
    for b in blocks:
        names.append(f"library_md_{b.line}.py")
        (work / names[-1]).write_text(b.code)
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
         "--cache-dir", str(tmp_path / "cache"),
         "--python-executable", str(venv_reading(tmp_path, ROOT)), *names],
        check=False, capture_output=True, text=True, cwd=work, env=env, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0 and out.stdout == "", out.stdout + out.stderr


def _type_checking_names() -> dict[str, tuple[str, str]]:
    """What type checkers read: each name the ``TYPE_CHECKING`` block binds publicly, as
    (module, name there). ``from m import a as a`` binds ``a``; ``b = _b`` binds ``b``
    to what ``from m import a as _b`` imported (mypy re-exports no other alias)."""
    tree = ast.parse(Path(ctrexec.__file__).read_text())
    (block,) = [
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    ]
    imported: dict[str, tuple[str, str]] = {}
    public: dict[str, tuple[str, str]] = {}
    for node in block.body:
        if isinstance(node, ast.ImportFrom) and node.module != "types":  # ModuleType's
            assert node.module is not None
            for a in node.names:
                name = a.asname or a.name
                assert a.asname == a.name or name.startswith("_"), ast.unparse(node)
                (public if name == a.name else imported)[name] = (node.module, a.name)
        elif isinstance(node, ast.Assign):
            (target,) = node.targets
            assert isinstance(target, ast.Name) and isinstance(node.value, ast.Name)
            public[target.id] = imported.pop(node.value.id)
    assert imported == {}, "imported under TYPE_CHECKING and never made public"
    return public


def test_type_checking_imports_are_exactly_the_public_names() -> None:
    """``_WHERE`` is the one hand-kept list (``__all__`` and the lazy loading are made
    from it); the ``TYPE_CHECKING`` imports, which mypy reads instead, must say the
    same: the same names, each the object ``ctrexec.X`` is at run time."""
    seen = _type_checking_names()

    def line(name: str, where: tuple[str, str]) -> str:
        return f"from {where[0]} import {where[1]} as {name}"

    missing = [line(n, w) for n, w in ctrexec._MODULE_OF.items() if seen.get(n) != w]
    extra = [line(n, w) for n, w in seen.items() if ctrexec._MODULE_OF.get(n) != w]
    assert (missing, extra) == ([], []), "add the first, drop the second under TYPE_CHECKING"
    assert ctrexec.__all__ == sorted(seen)
    for name, (module, attribute) in seen.items():
        assert getattr(ctrexec, name) is getattr(importlib.import_module(module), attribute)
    assert [n for n in ctrexec.__all__ if n not in dir(ctrexec)] == []
