"""docker's run/create flags of the second parity round, through the real binary:
--env-file, --init."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import Cli

pytestmark = pytest.mark.integration


def test_env_file_under_e(cli: Cli, test_image: str, tmp_path: Path) -> None:
    env_file = tmp_path / "app.env"
    env_file.write_text('# settings\nA=from file\nB="quoted"\nC=file\n')
    out = cli(
        "run", "--rm", "--env-file", str(env_file), "-e", "C=flag", test_image,
        "sh", "-c", 'printf "%s|%s|%s\\n" "$A" "$B" "$C"',
    )  # fmt: skip
    assert (out.returncode, out.stdout) == (0, 'from file|"quoted"|flag\n'), out.stderr


def test_env_file_errors_create_nothing(cli: Cli, test_image: str, tmp_path: Path) -> None:
    missing = cli("run", "--rm", "--name", "fl-envfile", "--env-file", "/nonexistent/env",
                  test_image, "true")  # fmt: skip
    assert (missing.returncode, missing.stderr) == (
        125,
        "ctrexec: open /nonexistent/env: no such file or directory\n",
    )
    bad = tmp_path / "bad.env"
    bad.write_text("MY VAR=1\n")
    out = cli("create", "--name", "fl-envfile", "--env-file", str(bad), test_image, "true")
    assert (out.returncode, out.stderr) == (
        125,
        "ctrexec: poorly formatted environment: variable 'MY VAR' contains whitespaces\n",
    )
    assert cli("inspect", "fl-envfile").returncode == 1
