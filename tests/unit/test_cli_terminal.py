"""The pure parts of the CLI's terminal handling: detach keys, their scanner, -it checks."""

from __future__ import annotations

import pytest

from ctrexec.cli import terminal
from ctrexec.cli.main import main
from ctrexec.errors import InvalidArgument, NotATerminal


@pytest.mark.parametrize(
    ("text", "codes"),
    [
        ("", b"\x10\x11"),  # docker's default, ctrl-p ctrl-q
        ("ctrl-p,ctrl-q", b"\x10\x11"),
        ("ctrl-@,ctrl-a,ctrl-z", b"\x00\x01\x1a"),
        ("ctrl-[,ctrl-\\,ctrl-],ctrl-^,ctrl-_", b"\x1b\x1c\x1d\x1e\x1f"),
        ("a,b", b"ab"),
        ("ctrl-x,DEL", b"\x18\x7f"),
    ],
)
def test_parse_detach_keys(text: str, codes: bytes) -> None:
    assert terminal.parse_detach_keys(text) == codes


@pytest.mark.parametrize("text", ["ctrl-", "ctrl-1", "ctrl-P", "alt-x", "ab", "x,,y", "é"])
def test_bad_detach_keys_are_refused_in_one_line(text: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        terminal.parse_detach_keys(text)
    assert "\n" not in str(info.value) and "--detach-keys" in str(info.value)


def test_scanner_detaches_on_the_whole_sequence() -> None:
    s = terminal.DetachScanner(b"\x10\x11")
    assert s.feed(b"ls\r\x10\x11after") == (b"ls\r", True)


def test_scanner_holds_a_partial_match_across_reads() -> None:
    s = terminal.DetachScanner(b"\x10\x11")
    assert s.feed(b"a\x10") == (b"a", False)
    assert s.feed(b"\x11") == (b"", True)


def test_scanner_passes_a_broken_match_on_with_the_byte_that_broke_it() -> None:
    s = terminal.DetachScanner(b"\x10\x11")
    assert s.feed(b"\x10") == (b"", False)
    assert s.feed(b"x") == (b"\x10x", False)
    assert s.feed(b"\x10\x10\x11") == (b"\x10", True)  # a repeated first key restarts


def test_scanner_with_no_keys_passes_everything() -> None:
    assert terminal.DetachScanner(b"").feed(b"\x10\x11") == (b"\x10\x11", False)


def test_check_input_needs_a_terminal_only_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(terminal.os, "isatty", lambda _fd: False)
    terminal.check_input(True, False)
    terminal.check_input(False, True)
    with pytest.raises(NotATerminal) as info:
        terminal.check_input(True, True)
    assert str(info.value) == "the input device is not a TTY"
    assert info.value.exit_code == 1  # docker's code for it


def test_cli_run_it_without_a_terminal_exits_1_before_connecting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(terminal.os, "isatty", lambda _fd: False)
    argv = ["run", "--address", "/nonexistent.sock", "-it", "img", "sh"]
    assert main(argv) == 1
    assert capsys.readouterr().err == "ctrexec: the input device is not a TTY\n"


def test_cli_exec_timeout_with_it_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["exec", "--address", "/nonexistent.sock", "-i", "--timeout", "1", "x", "sh"]
    assert main(argv) == 125
    assert "--timeout cannot be used with -i or -t" in capsys.readouterr().err


def test_cli_bad_detach_keys_exit_125(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["attach", "--address", "/nonexistent.sock", "--detach-keys", "ctrl-", "x"]
    assert main(argv) == 125
    assert capsys.readouterr().err.startswith("ctrexec: invalid --detach-keys 'ctrl-'")
