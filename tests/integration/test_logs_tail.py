"""``logs --tail`` and ``--since`` through the real CLI (issue 37, item 2).

A container prints 200,000 lines on both streams, ending without a newline; its log
is then rotated across two files. What ``logs`` prints with ``--tail``/``--since``
(and ``-t``, ``-f``) must be the whole log, read by the library and filtered here;
and a ``--tail 10`` must read what it prints: the bytes the CLI process read
(``rchar`` in /proc/PID/io, the kernel's count) for the 20 MB log and for a
one-line log differ by far less than the log.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from _cli import TEST_NAMESPACE, Cli
from _support import until

from ctrexec.logs import reader as logs

LINES = 200_000
END = "the end, no newline"
SCRIPT = (
    "awk 'BEGIN { for (i = 0; i < %d; i++) "
    '{ if (i %% 5 == 0) print "err line " i > "/dev/stderr"; '
    'else print "out line of some length " i } }\'; printf "%s"'
)
#: Runs the CLI in this process's child and writes the bytes it read (rchar) to a file.
PROBE = """
import atexit, os, runpy, sys

def report():  # at exit: the CLI ends with os._exit after the atexit handlers
    io = dict(line.split(": ") for line in open("/proc/self/io").read().splitlines())
    open(os.environ["RCHAR_FILE"], "w").write(io["rchar"])

atexit.register(report)
sys.argv = ["ctrexec", *sys.argv[2:]]
runpy.run_module("ctrexec.cli.main", run_name="__main__", alter_sys=True)
"""


def log_path(cli: Cli, name: str) -> Path:
    assert cli.log_dir is not None
    return cli.log_dir / TEST_NAMESPACE / name / "task.log"


def run_to_end(cli: Cli, image: str, name: str, lines: int) -> list[logs.LogEntry]:
    """Run the printer, wait until its partial last line is in the log: the log is whole."""
    out = cli("run", "-d", "--name", name, image, "sh", "-c", SCRIPT % (lines, END))
    assert out.returncode == 0, out.stderr
    path = log_path(cli, name)

    last_err = f"err line {(lines - 1) // 5 * 5}\n"

    def ended() -> bool:  # each stream's last line is in: the streams are read apart
        out = list(logs.read_logs(path, tail=1, streams=["stdout"]))
        err = list(logs.read_logs(path, tail=1, streams=["stderr"]))
        return [e.message for e in out + err] == [END, last_err]

    until(ended, f"{name}'s log ends with its last line", timeout=180)
    return list(logs.read_logs(path))


def shown(entries: list[logs.LogEntry], timestamps: bool) -> tuple[str, str]:
    """What ``logs`` prints of these entries: (stdout, stderr)."""
    stamp = lambda e: f"{e.time} " if timestamps else ""  # noqa: E731
    return tuple(  # type: ignore[return-value]
        "".join(stamp(e) + e.message for e in entries if e.stream == stream)
        for stream in ("stdout", "stderr")
    )


def rfc3339_us(time_ns: int) -> tuple[str, int]:
    """A time as ``--since`` takes it (microseconds), and its value in ns."""
    secs, frac = divmod(time_ns, 1_000_000_000)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{frac // 1000:06d}Z"
    return text, secs * 1_000_000_000 + frac // 1000 * 1000


def rchar(cli: Cli, tmp_path: Path, *args: str) -> int:
    """Bytes the CLI process read, running ``logs ARGS`` in-process (no command server)."""
    out_file = tmp_path / "rchar"
    argv = cli.argv("logs", *args)
    argv = [sys.executable, "-c", PROBE, "--", *argv[3:]]
    env = {**os.environ, "RCHAR_FILE": str(out_file), "CTREXEC_NO_SERVER": "1"}
    done = subprocess.run(argv, capture_output=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return int(out_file.read_text())


def test_tail_and_since_print_the_whole_log_filtered(
    cli: Cli, test_image: str, tmp_path: Path
) -> None:
    name = "logtail-big"
    try:
        entries = run_to_end(cli, test_image, name, LINES)
        path = log_path(cli, name)
        assert Path(f"{path}.1").exists(), "the log was meant to rotate"
        in_current = path.read_bytes().count(b"\n")  # a tail beyond it crosses into .1
        for tail in ("0", "1", "10", str(in_current + 7), "all"):
            for stamps in ((), ("-t",)):
                got = cli("logs", "--tail", tail, *stamps, name)
                assert got.returncode == 0, got.stderr
                kept = entries if tail == "all" else entries[len(entries) - int(tail) :]
                kept = kept if tail != "0" else []
                assert (got.stdout, got.stderr) == shown(kept, bool(stamps)), (tail, stamps)
        for back in (1, 10, 5000, in_current + 11):
            since, since_ns = rfc3339_us(entries[-back].time_ns)
            got = cli("logs", "-t", "--since", since, name)
            kept = [e for e in entries if e.time_ns >= since_ns]
            assert (got.stdout, got.stderr) == shown(kept, True), back
            got = cli("logs", "--since", since, "--tail", "3", name)
            assert (got.stdout, got.stderr) == shown(kept[-3:], False), back
        for tail in ("5000", "all"):  # one pipe for both: the entries' order is kept
            merged = subprocess.run(
                cli.argv("logs", "--tail", tail, name),
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120, check=True,
            )  # fmt: skip
            kept = entries if tail == "all" else entries[-int(tail) :]
            assert merged.stdout.decode() == "".join(e.message for e in kept), tail
        got = cli("logs", "-f", "--tail", "5", name)  # exited: ends after the settle
        assert (got.stdout, got.stderr) == shown(entries[-5:], False)
    finally:
        cli("rm", "-f", name)


def test_tail_reads_what_it_prints_not_the_log(cli: Cli, test_image: str, tmp_path: Path) -> None:
    """Counted by the kernel, not timed: ``--tail 10`` of a 20 MB log reads about what
    it reads of a one-line log (module files and RPCs are the same in both)."""
    big, small = "logtail-cost-big", "logtail-cost-small"
    try:
        run_to_end(cli, test_image, big, LINES)
        run_to_end(cli, test_image, small, 1)
        size = sum(p.stat().st_size for p in log_path(cli, big).parent.glob("task.log*"))
        assert size > 15 * 1024 * 1024
        base = min(rchar(cli, tmp_path, "--tail", "10", small) for _ in range(2))
        cost = min(rchar(cli, tmp_path, "--tail", "10", big) for _ in range(2))
        assert cost - base < 1024 * 1024, (cost, base, size)
        full = rchar(cli, tmp_path, big)
        assert full - base > size * 0.9  # the probe sees what a whole read reads
    finally:
        cli("rm", "-f", big, small)
