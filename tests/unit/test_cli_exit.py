"""``ctrexec`` (cli.main.entry) ends like Python would, minus the module teardown."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

_PROGRAM = textwrap.dedent(
    """
    import atexit, os, sys, threading, time
    from ctrexec.cli import main as cli

    class TornDown:
        def __del__(self):
            os.write(2, b"module teardown ran")

    keep = TornDown()  # freed only by interpreter finalization

    def fake_main(argv=None):
        atexit.register(lambda: sys.stdout.write(" atexit ran"))
        late = lambda: (time.sleep(0.2), sys.stdout.write(" thread joined"))
        threading.Thread(target=late).start()
        sys.stdout.write("buffered")  # no newline, stdout a pipe: still in the buffer
        return 3

    cli.main = fake_main
    cli.entry()
    """
)


def test_entry_joins_threads_runs_atexit_flushes_and_skips_teardown() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    out = subprocess.run(
        [sys.executable, "-c", _PROGRAM],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 3
    assert out.stdout == "buffered thread joined atexit ran"
    assert "module teardown ran" not in out.stderr


def test_entry_keeps_the_exit_code_and_one_line_error() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ctrexec.cli.main", "ps", "--address", "/nonexistent/c.sock"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 125
    assert out.stderr.strip().splitlines() == [
        "ctrexec: containerd socket /nonexistent/c.sock does not exist"
    ]


def test_under_a_profiler_entry_exits_normally_so_results_are_written(tmp_path: Path) -> None:
    stats = tmp_path / "cli.prof"
    argv = ["-m", "cProfile", "-o", str(stats), "-m", "ctrexec.cli.main"]
    out = subprocess.run(
        [sys.executable, *argv, "ps", "--address", "/nonexistent/c.sock"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "/nonexistent/c.sock does not exist" in out.stderr  # cProfile drops the code
    assert stats.stat().st_size > 0


_BROKEN = textwrap.dedent(
    """
    import argparse
    from ctrexec.cli import main as cli

    def verb(args):
        raise BrokenPipeError(32, "Broken pipe")

    cli.parse = lambda argv=None: argparse.Namespace(func=verb)
    cli.entry()
    """
)


def test_a_broken_pipe_that_is_not_our_reader_gone_is_an_error() -> None:
    """A daemon's socket breaking in a wait once ended it with 0 and nothing printed."""
    out = subprocess.run(
        [sys.executable, "-c", _BROKEN], check=False, capture_output=True, text=True, timeout=60
    )
    assert (out.returncode, out.stdout) == (125, "")
    assert out.stderr.splitlines() == ["ctrexec: [Errno 32] Broken pipe"]


def test_a_reader_that_went_away_ends_the_command_quietly() -> None:
    """``ctrexec ps | head -1``: head has what it wanted; no error, as docker's."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        out = subprocess.run(
            [sys.executable, "-c", _BROKEN],
            check=False,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert (out.returncode, out.stderr) == (0, "")
