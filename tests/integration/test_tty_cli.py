"""run -it, exec -it, attach, detach, resize and stdin EOF, typed on a real pty.

Each test types into a shell in the container and reads the screen, as a user does;
waits are bounded polls of the screen (``PtyCli.expect``), never fixed sleeps.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import termios
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import Cli
from _pty import PtyCli
from _support import until

from ctrexec.logs import client as logd
from ctrexec.logs import daemon as logdaemon

PROMPT = b"# "
DETACH = b"\x10\x11"  # ctrl-p ctrl-q


@pytest.fixture
def ptys(cli: Cli, test_image: str) -> Iterator[list[PtyCli]]:
    """PtyClis the test opens; closed, and the test's containers removed, after it."""
    opened: list[PtyCli] = []
    yield opened
    for p in opened:
        p.close()
    names = cli("ps", "-a").stdout.split()
    gone = [n for n in names if n.startswith("tty-")]
    if gone:
        cli("rm", "-f", *gone)
    assert cli.log_dir is None or list(cli.log_dir.rglob("fifo")) == []  # rm removed them
    if cli.log_dir is not None:  # and the logs, their FIFOs, the log daemon's registrations
        assert [p for p in cli.log_dir.rglob("*") if not p.is_dir()] == []
        assert _registrations_under(cli.log_dir) == []


def _registrations_under(log_dir: Path) -> list[str]:
    """The log daemon's registrations of runs logging under ``log_dir``."""
    found = []
    where = logd.state_dir() / logdaemon.STREAMS_DIR
    for reg in where.glob("*.json") if where.is_dir() else []:
        with contextlib.suppress(OSError, ValueError):
            if json.loads(reg.read_text())["log"].startswith(f"{log_dir}/"):
                found.append(reg.stem)
    return found


def _open(ptys: list[PtyCli], cli: Cli, command: str, *args: str, **size: int) -> PtyCli:
    p = PtyCli(cli.argv(command, *args), **size)
    ptys.append(p)
    return p


def _raw(attrs: list[object]) -> bool:
    lflag = attrs[3]
    assert isinstance(lflag, int)
    return not lflag & (termios.ECHO | termios.ICANON | termios.ISIG)


def test_run_it_shell_and_exit_code(cli: Cli, test_image: str, ptys: list[PtyCli]) -> None:
    p = _open(ptys, cli, "run", "--rm", "-it", "--name", "tty-run", test_image, "sh")
    p.expect(PROMPT)
    until(lambda: _raw(p.attrs()), "the CLI's terminal in raw mode")
    p.write(b"echo $((6*7)) $TERM\r")
    p.expect(b"42 xterm")
    p.write(b"exit 3\r")
    assert p.wait() == 3
    assert p.attrs() == p.before  # and restored it
    assert "tty-run" not in cli("ps", "-a").stdout  # --rm


def test_exec_it_shell_and_resize(cli: Cli, test_image: str, ptys: list[PtyCli]) -> None:
    cli("run", "-d", "--name", "tty-exec", test_image, "sleep", "600", check=True)
    p = _open(ptys, cli, "exec", "-it", "tty-exec", "sh", rows=24, cols=80)
    p.expect(PROMPT)
    p.write(b"stty size\r")
    p.expect(b"24 80")
    p.resize(33, 101)  # TIOCSWINSZ: the kernel sends the CLI SIGWINCH
    p.write(b"stty size\r")
    p.expect(b"33 101")
    p.write(b"exit 0\r")
    assert p.wait() == 0
    assert p.attrs() == p.before


def test_detach_then_attach_again(cli: Cli, test_image: str, ptys: list[PtyCli]) -> None:
    p = _open(ptys, cli, "run", "-it", "--name", "tty-detach", test_image, "sh")
    p.expect(PROMPT)
    p.write(b"x=$((100+23))\r")
    p.expect(PROMPT)
    p.write(DETACH)
    assert p.wait() == 0
    assert p.attrs() == p.before
    assert '"running"' in cli("inspect", "tty-detach").stdout
    again = _open(ptys, cli, "attach", "tty-detach")
    again.write(b"echo $x\r")
    again.expect(b"123")
    again.write(DETACH)
    assert again.wait() == 0
    third = _open(ptys, cli, "attach", "tty-detach")
    third.write(b"exit 4\r")
    assert third.wait() == 4
    assert third.attrs() == third.before


def test_custom_detach_keys(cli: Cli, test_image: str, ptys: list[PtyCli]) -> None:
    cli("run", "-d", "--name", "tty-keys", test_image, "sleep", "600", check=True)
    p = _open(ptys, cli, "exec", "-it", "--detach-keys", "ctrl-a,x", "tty-keys", "sh")
    p.expect(PROMPT)
    p.write(b"\x10\x11echo $((5+5))\r")  # the default keys are just input now
    p.expect(b"10")
    p.write(b"\x01x")
    assert p.wait() == 0


def test_terminal_restored_after_sigkill_of_the_task(
    cli: Cli, test_image: str, ptys: list[PtyCli]
) -> None:
    p = _open(ptys, cli, "run", "-it", "--name", "tty-kill", test_image, "sh")
    p.expect(PROMPT)
    until(lambda: _raw(p.attrs()), "the CLI's terminal in raw mode")
    assert cli("kill", "-s", "KILL", "tty-kill").returncode == 0
    assert p.wait() == 128 + signal.SIGKILL
    assert p.attrs() == p.before


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_terminal_restored_when_the_cli_is_signalled(
    cli: Cli, test_image: str, ptys: list[PtyCli], sig: signal.Signals
) -> None:
    p = _open(ptys, cli, "run", "-it", "--name", "tty-sig", test_image, "sh")
    p.expect(PROMPT)
    until(lambda: _raw(p.attrs()), "the CLI's terminal in raw mode")
    p.proc.send_signal(sig)
    assert p.wait() == 128 + sig
    assert p.attrs() == p.before
    assert '"running"' in cli("inspect", "tty-sig").stdout  # docker's: the task runs on


def test_run_i_passes_stdin_and_its_eof(cli: Cli, test_image: str) -> None:
    res = subprocess.run(  # noqa: PLW1510 (the exit code is asserted)
        cli.argv("run", "--rm", "-i", test_image, "cat"),
        input="hi\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (res.returncode, res.stdout, res.stderr) == (0, "hi\n", "")


def test_exec_i_stdout_and_stderr_apart(cli: Cli, test_image: str, ptys: list[PtyCli]) -> None:
    cli("run", "-d", "--name", "tty-execi", test_image, "sleep", "600", check=True)
    res = subprocess.run(  # noqa: PLW1510 (the exit code is asserted)
        cli.argv("exec", "-i", "tty-execi", "sh", "-c", "cat; echo err >&2; exit 6"),
        input="in\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (res.returncode, res.stdout, res.stderr) == (6, "in\n", "err\n")


def test_it_without_a_terminal_is_docker_s_error(cli: Cli, test_image: str) -> None:
    for argv in (
        cli.argv("run", "-it", "--name", "tty-none", test_image, "sh"),
        cli.argv("exec", "-it", "tty-none", "sh"),
    ):
        res = subprocess.run(  # noqa: PLW1510 (the exit code is asserted)
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120
        )
        assert res.returncode == 1
        assert res.stderr == "ctrexec: the input device is not a TTY\n"
    assert "tty-none" not in cli("ps", "-a").stdout  # nothing was created


def test_run_i_logs_stdout_and_stderr_apart(cli: Cli, test_image: str, ptys: list[PtyCli]) -> None:
    """Docker's -i without -t: stdin from the client, both streams in the log."""
    res = subprocess.run(  # noqa: PLW1510 (the exit code is asserted)
        cli.argv("run", "-i", "--name", "tty-logs", test_image, "sh", "-c", "cat; echo oops >&2"),
        input="typed in\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (res.returncode, res.stdout, res.stderr) == (0, "typed in\n", "oops\n")
    logs = cli("logs", "tty-logs", check=True)
    assert (logs.stdout, logs.stderr) == ("typed in\n", "oops\n")


def test_logs_of_an_interactive_task_with_another_driver_say_why_in_one_line(
    cli: Cli, test_image: str, ptys: list[PtyCli]
) -> None:
    cli(
        "run",
        "-d",
        "-i",
        "--log-driver",
        "file",
        "--name",
        "tty-nolog",
        test_image,
        "cat",
        check=True,
    )
    res = cli("logs", "tty-nolog")
    assert res.returncode == 125
    assert res.stderr.count("\n") == 1 and "ctrexec attach tty-nolog" in res.stderr
    until(lambda: '"running"' in cli("inspect", "tty-nolog").stdout, "tty-nolog running")


def test_create_i_then_start_ai_twice(cli: Cli, test_image: str, ptys: list[PtyCli]) -> None:
    cli("create", "-i", "--name", "tty-start", test_image, "cat", check=True)
    for word in ("first", "again"):  # a second start of the exited task reuses its FIFOs
        res = subprocess.run(  # noqa: PLW1510 (the exit code is asserted)
            cli.argv("start", "-ai", "tty-start"),
            input=f"{word}\n",
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (res.returncode, res.stdout, res.stderr) == (0, f"{word}\n", "")


def test_destroy_removes_the_task_fifos(cli: Cli, test_image: str, ptys: list[PtyCli]) -> None:
    assert cli.log_dir is not None
    cli("run", "-d", "-it", "--name", "tty-fifos", test_image, "sh", check=True)
    fifo_dirs = list(cli.log_dir.rglob("fifo"))
    assert len(fifo_dirs) == 1 and {p.name for p in fifo_dirs[0].iterdir()} == {
        "stdin",
        "stdout",
    }
    cli("rm", "-f", "tty-fifos", check=True)
    assert not fifo_dirs[0].exists()


def test_run_i_forwards_sigint_to_the_task(cli: Cli, test_image: str, ptys: list[PtyCli]) -> None:
    script = 'trap "echo got-int; exit 9" INT; echo ready; while :; do sleep 1; done'
    proc = subprocess.Popen(
        cli.argv("run", "-i", "--name", "tty-proxy", test_image, "sh", "-c", script),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"  # the trap is set
        proc.send_signal(signal.SIGINT)
        out, _err = proc.communicate(timeout=60)
        assert (proc.returncode, out) == (9, b"got-int\n")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


# -- a terminal task's log: what the terminal showed, kept whether a client is attached


def _logs(cli: Cli, name: str, *args: str) -> str:
    """``logs`` as written, CRLF kept (``cli()``'s text mode would make them LF)."""
    res = subprocess.run(cli.argv("logs", *args, name), capture_output=True, timeout=120)  # noqa: PLW1510
    assert (res.returncode, res.stderr) == (0, b"")  # a terminal has one stream: stdout
    return res.stdout.decode()


def _to_terminal(cli: Cli, name: str, text: str) -> None:
    """Print ``text`` on the task's terminal from outside it (pid 1's stdout is the tty)."""
    cli("exec", name, "sh", "-c", f"echo {text} > /proc/1/fd/1", check=True)


def test_run_it_keeps_a_log_while_attached_and_after_detach(
    cli: Cli, test_image: str, ptys: list[PtyCli]
) -> None:
    p = _open(ptys, cli, "run", "-it", "--name", "tty-log", test_image, "sh")
    p.expect(PROMPT)
    p.write(b"echo typed-$((40+2))\r")
    p.expect(b"typed-42")
    p.write(DETACH)
    assert p.wait() == 0
    # What was typed (the tty's echo) and printed, CRLF as the terminal wrote them.
    until(lambda: "typed-42\r\n" in _logs(cli, "tty-log"), "the output in the log")
    assert "echo typed-$((40+2))" in _logs(cli, "tty-log")
    _to_terminal(cli, "tty-log", "after-detach")
    until(lambda: "after-detach\r\n" in _logs(cli, "tty-log"), "output after detach logged")
    follow = subprocess.Popen(cli.argv("logs", "-f", "tty-log"), stdout=subprocess.PIPE)
    try:
        assert follow.stdout is not None
        seen = bytearray()

        def shown(wanted: bytes) -> bool:
            if select.select([follow.stdout], [], [], 0.1)[0]:
                seen.extend(os.read(follow.stdout.fileno(), 65536))  # type: ignore[union-attr]
            return wanted in seen

        until(lambda: shown(b"after-detach"), "logs -f to show the log so far")
        _to_terminal(cli, "tty-log", "followed")
        until(lambda: shown(b"followed\r\n"), "logs -f to show new output")
        again = _open(ptys, cli, "attach", "tty-log")
        again.write(b"echo typed-again-$((2+3))\r")  # its stdin: its stdout is open by now
        again.expect(b"typed-again-5")
        _to_terminal(cli, "tty-log", "seen-by-attach")
        again.expect(b"seen-by-attach")  # attach sees new output, as the log does
        again.write(b"exit 5\r")
        assert again.wait() == 5
        assert follow.wait(timeout=60) == 0  # -f ends with the task
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait(30)
        if follow.stdout is not None:
            follow.stdout.close()
    logged = _logs(cli, "tty-log")
    assert "typed-again-5\r\n" in logged and "seen-by-attach\r\n" in logged


def test_run_dt_logs_with_no_client_ever(cli: Cli, test_image: str, ptys: list[PtyCli]) -> None:
    script = "echo hello-dt; sleep 600"
    cli("run", "-dt", "--name", "tty-dt", test_image, "sh", "-c", script, check=True)
    until(lambda: _logs(cli, "tty-dt") == "hello-dt\r\n", "the detached terminal's log")
    cli("rm", "-f", "tty-dt", check=True)  # rm drops the daemon's run; the fixture audits


def test_a_flood_after_detach_never_blocks_the_task(
    cli: Cli, test_image: str, ptys: list[PtyCli]
) -> None:
    """Ten times a pipe's 64 KiB, printed with nobody attached: the task still ends."""
    p = _open(ptys, cli, "run", "-it", "--name", "tty-flood", test_image, "sh")
    p.expect(PROMPT)
    p.write(b"while [ ! -e /tmp/go ]; do sleep 0.1; done; seq 1 100000; exit 7\r")
    p.write(DETACH)
    assert p.wait() == 0
    cli("exec", "tty-flood", "touch", "/tmp/go", check=True)  # the flood starts detached
    res = cli("wait", "tty-flood", timeout=300)  # bounded by the timeout, not asserted on
    assert res.stdout.strip() == "7"
    # The log daemon copies what the task wrote last after its exit (it may still be in
    # the FIFO when wait returns): the last line comes, bounded, not at once.
    until(lambda: _logs(cli, "tty-flood", "--tail", "1") == "100000\r\n", "the last line logged")
