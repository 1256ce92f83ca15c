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


def test_unknown_command_is_docker_s_two_lines_and_exit_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["xyzzy"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "ctrexec: 'xyzzy' is not a ctrexec command.",
        "See 'ctrexec --help'.",
    ]


def test_mistyped_verb_names_the_closest_not_all(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sp"]) == 1
    first, second = capsys.readouterr().err.splitlines()
    assert first == "ctrexec: 'sp' is not a ctrexec command."
    assert second.startswith("Did you mean ") and "'ctrexec ps'" in second
    assert second.endswith("See 'ctrexec --help'.")
    assert "rename" not in second  # not argparse's list of every verb


def test_mistyped_subverb_names_its_group(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["netns", "lss"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "ctrexec: 'lss' is not a ctrexec netns command.",
        "Did you mean 'ctrexec netns ls'? See 'ctrexec netns --help'.",
    ]


def test_other_bad_choices_stay_argparse_s(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--pull", "sometimes", "img", "true"]) == 125
    assert "invalid choice: 'sometimes'" in _one_line_error(capsys)


@pytest.mark.parametrize(
    "argv",
    [
        ["--address", "SOCK", "info"],
        ["--address", "SOCK", "-n", "other", "ps"],
        ["--namespace", "other", "info", "--address", "SOCK"],
        ["--address", "/elsewhere.sock", "info", "--address", "SOCK"],  # the verb's wins
        ["-H", "unix://SOCK", "info"],  # docker's spelling
        ["--host", "SOCK", "version"],
    ],
)
def test_connection_flags_before_the_verb(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sock = str(tmp_path / "nope.sock")
    assert main([a.replace("SOCK", sock) for a in argv]) == 125
    assert f"containerd socket {sock} does not exist" in _one_line_error(capsys)


def test_namespace_before_the_verb_reaches_it() -> None:
    from ctrexec.cli.main import build_parser

    args = build_parser().parse_args(["-n", "before", "logs", "-n", "3", "web"])
    assert (args.namespace, args.tail) == ("before", 3)
    args = build_parser().parse_args(["--namespace", "before", "ps", "-N", "after"])
    assert args.namespace == "after"


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
