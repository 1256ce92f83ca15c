"""``scripts/setup`` fails loudly when a step fails (issue 39: offline, pip's failure was
swallowed by the filter on its output and setup reported success).

The script runs from a temporary copy of the checkout's layout, so nothing touches the
real ``.venv``: ``dpkg-query`` on PATH says every package is installed, and ``.venv``
holds a fake ``python`` (which cannot import the dev tools until "pip" has run) and a
fake ``pip`` that fails or succeeds as the test says. No root, no network.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).parents[2]

#: pip's noisy line that setup filters out: with nothing else printed, grep's own status
#: is 1, which must not count as a failure.
NOISE = "WARNING: Location 'x' is ignored: it is either a non-existing path or lacks a scheme."


def _checkout(tmp_path: Path, *, pip_status: int, pip_says: str) -> tuple[Path, dict[str, str]]:
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "setup", root / "scripts" / "setup")
    (root / "pyproject.toml").write_text("[project]\nname = 'fake'\n")
    venv = root / ".venv" / "bin"
    venv.mkdir(parents=True)
    marker = root / ".venv" / "pip-ran"
    _script(
        venv / "python",
        # -c: the import check, true once pip has run; -: the bytecode step's stdin.
        f'if [ "$1" = - ]; then cat >/dev/null; exit 0; fi\n[ -e {marker} ]\n',
    )
    made = f"touch {marker}\n" if pip_status == 0 else ""
    _script(venv / "pip", f"echo {pip_says!r} >&2\n{made}exit {pip_status}\n")
    shims = tmp_path / "bin"
    shims.mkdir()
    _script(shims / "dpkg-query", "echo 'install ok installed'\n")
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', os.defpath)}"}
    return root, env


def _script(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}")
    path.chmod(0o755)


def _setup(root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(root / "scripts" / "setup")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_failed_pip_fails_setup_and_names_the_step(tmp_path: Path) -> None:
    root, env = _checkout(tmp_path, pip_status=1, pip_says="ERROR: No matching distribution")
    out = _setup(root, env)
    assert out.returncode != 0, out.stderr
    assert "ERROR: No matching distribution" in out.stderr  # pip's own words still show
    assert "setup: FAILED: pip install -e '.[dev]' into .venv exited 1" in out.stderr
    assert not (root / ".venv" / ".installed").exists()


def test_a_failed_pip_whose_only_output_is_filtered_still_fails(tmp_path: Path) -> None:
    root, env = _checkout(tmp_path, pip_status=2, pip_says=NOISE)
    out = _setup(root, env)
    assert out.returncode != 0, out.stderr
    assert "exited 2" in out.stderr
    assert NOISE not in out.stderr


def test_a_pip_that_prints_only_the_filtered_warning_succeeds(tmp_path: Path) -> None:
    """grep -v exits 1 when it drops every line; that is not pip's failure."""
    root, env = _checkout(tmp_path, pip_status=0, pip_says=NOISE)
    out = _setup(root, env)
    assert out.returncode == 0, out.stderr
    assert "FAILED" not in out.stderr
    assert NOISE not in out.stderr
    assert (root / ".venv" / ".installed").exists()


def test_a_failing_step_outside_pip_is_named(tmp_path: Path) -> None:
    """The bytecode step (the .venv's python reading a script on stdin) fails."""
    root, env = _checkout(tmp_path, pip_status=0, pip_says="")
    _script(
        root / ".venv" / "bin" / "python",
        f'if [ "$1" = - ]; then cat >/dev/null; exit 3; fi\n[ -e {root}/.venv/pip-ran ]\n',
    )
    out = _setup(root, env)
    assert out.returncode != 0, out.stderr
    assert "setup: FAILED: compiling the bytecode of ctrexec's modules" in out.stderr
