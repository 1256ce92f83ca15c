"""CLI contract without a daemon: one-line errors and exit code 125."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctrexec.cli.main import main


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    return lines[0]


def test_unknown_flag_is_125(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "--bogus"]) == 125
    assert "unrecognized arguments: --bogus" in _one_line_error(capsys)


def test_unknown_command_is_125(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frobnicate"]) == 125
    _one_line_error(capsys)


@pytest.mark.parametrize("command", ["info", "version"])
def test_missing_socket_names_it(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sock = tmp_path / "nope.sock"
    assert main([command, "--address", str(sock)]) == 125
    line = _one_line_error(capsys)
    assert str(sock) in line


def test_regular_file_is_not_a_socket(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "file"
    f.write_text("")
    assert main(["info", "--address", str(f), "--json"]) == 125
    assert "not a unix socket" in _one_line_error(capsys)


def test_bad_namespace_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "--address", str(tmp_path / "x.sock"), "--namespace", "a/b"]) == 125
    assert "namespace" in _one_line_error(capsys)
