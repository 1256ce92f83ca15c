"""``ctrexec`` (cli.main.entry) ends like Python would, minus the module teardown."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from ctrexec.cli import main as cli

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


def test_a_profile_hook_set_in_this_interpreter_is_seen() -> None:
    """The hook cProfile used up to Python 3.11 (and profile, and coverage's tracer)."""
    before = sys.getprofile()
    sys.setprofile(lambda *_: None)
    try:
        assert cli.observed()
    finally:
        sys.setprofile(before)


@pytest.mark.skipif(not hasattr(sys, "monitoring"), reason="sys.monitoring is Python 3.12+")
def test_a_monitoring_tool_in_this_interpreter_is_seen() -> None:
    """Python 3.12+'s cProfile claims sys.monitoring's profiler id, leaving the hooks unset."""
    monitoring = sys.monitoring  # type: ignore[attr-defined,unused-ignore]
    if monitoring.get_tool(monitoring.PROFILER_ID) is not None:
        pytest.skip("a profiler already watches this run")
    monitoring.use_tool_id(monitoring.PROFILER_ID, "ctrexec-test")
    try:
        assert cli.observed()
    finally:
        monitoring.free_tool_id(monitoring.PROFILER_ID)


@pytest.mark.parametrize(
    ("tools", "seen"),
    [({}, False), ({2: "cProfile"}, True), ({1: "coverage.py"}, True), ({0: "pdb"}, True),
     ({5: "an optimizer"}, False)],
)  # fmt: skip
def test_monitoring_tools_are_read_by_their_ids(
    monkeypatch: pytest.MonkeyPatch, tools: dict[int, str], seen: bool
) -> None:
    """A stand-in for sys.monitoring, on any Python: the debugger, coverage and profiler
    ids count, other tools (an optimizer writes no results at exit) do not."""
    stand_in = types.SimpleNamespace(
        DEBUGGER_ID=0, COVERAGE_ID=1, PROFILER_ID=2, OPTIMIZER_ID=5, get_tool=tools.get
    )
    monkeypatch.setattr(sys, "monitoring", stand_in, raising=False)
    monkeypatch.setattr(sys, "getprofile", lambda: None)
    monkeypatch.setattr(sys, "gettrace", lambda: None)
    assert cli.observed() is seen


def test_without_monitoring_only_the_hooks_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """Python 3.11 has no sys.monitoring: the hooks are the whole answer."""
    monkeypatch.delattr(sys, "monitoring", raising=False)
    monkeypatch.setattr(sys, "getprofile", lambda: None)
    monkeypatch.setattr(sys, "gettrace", lambda: None)
    assert not cli.observed()
    monkeypatch.setattr(sys, "gettrace", lambda: print)
    assert cli.observed()


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
