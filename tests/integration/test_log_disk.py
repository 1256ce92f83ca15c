"""A full log disk costs a task its output, marked and counted, never the task itself.

The log directory is a 2 MiB tmpfs of the test's own (mounted under /tmp, unmounted
after); a filler file takes what is left of it, so the next append gets ENOSPC as on
a real full disk. json-file drops and counts, marks the gap when space is back, and
keeps the task running; ``file`` mode blocks when its disk fills (documented in
``ctrexec.logs.modes``), so there ``doctor`` warns before it does.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import Cli
from _support import until

from ctrexec.logs import client as logdaemon_client
from ctrexec.logs import reader as logs

#: ~150 bytes a line, ~50 lines/s: the disk is filled by the filler, not the task. The
#: task also writes its counter into its own rootfs (renamed into place, so a reader
#: never sees it half written), which ``exec`` reads back.
FLOOD = (
    "i=0; while :; do echo \"line $i $(printf '%0120d' 0)\"; echo $i > /tmp/m; mv /tmp/m /tmp/n; "
    "i=$((i+1)); sleep 0.02; done"
)
#: The same, slower: a file-mode task must not fill the disk while doctor looks.
SLOW = FLOOD.replace("sleep 0.02", "sleep 0.5")
MARKER = re.compile(r"\[ctrexec: (\d+) bytes of output dropped here: No space left on device\]")


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A 2 MiB tmpfs as the tasks' log directory."""
    where = Path(f"/tmp/lgd-logdisk-{os.getpid()}")
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "lgd-logdisk", where], check=True)
    try:
        yield where
    finally:
        if subprocess.run(["umount", where], check=False).returncode != 0:
            subprocess.run(["umount", "-l", where], check=False)
        where.rmdir()


def fill(disk: Path, leave: int = 0) -> Path:
    """Take the disk's free space, but ``leave`` bytes; the filler is removed to free it."""
    filler = disk / "filler"
    with filler.open("wb") as f:
        while True:
            vfs = os.statvfs(disk)
            free = vfs.f_bavail * vfs.f_frsize - leave
            if free <= 0:
                break
            try:
                f.write(b"\0" * min(free, 1 << 16))
                f.flush()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
    return filler


def _counter(cli: Cli, name: str) -> int:
    done = cli("exec", name, "cat", "/tmp/n", timeout=30)
    return int(done.stdout) if done.returncode == 0 and done.stdout.strip().isdigit() else -1


def _inspect_dropped(cli: Cli, name: str) -> int:
    return int(json.loads(cli("inspect", name, check=True).stdout)[0]["LogDroppedBytes"])


def _numbers(entries: list[logs.LogEntry]) -> list[int]:
    return [int(e.message.split()[1]) for e in entries if e.stream == "stdout"]


@pytest.mark.parametrize("transport", ["daemon", "process"])
def test_json_file_drops_marks_and_counts_and_the_task_runs_on(
    transport: str, small_disk: Path, containerd_address: str, test_image: str, made: list[str]
) -> None:
    cli = Cli(containerd_address, log_dir=small_disk)
    name = f"lgd-json-full-{transport}"
    made.append(name)
    opt = f"transport={transport}"
    cli("run", "-d", "--log-opt", opt, "--name", name, test_image, "sh", "-c", FLOOD, check=True)
    until(lambda: next(iter(small_disk.rglob("task.log")), None) is not None, "log made")
    log = next(iter(small_disk.rglob("task.log")))
    until(lambda: len(_numbers(list(logs.read_logs(log)))) >= 3, "first lines logged")

    filler = fill(small_disk)
    if transport == "daemon":  # a log process of the task's own keeps its count to itself
        until(lambda: _inspect_dropped(cli, name) > 0, "inspect counts the bytes dropped")
    # Still running and answering, its output going nowhere: the counter moves on.
    seen = _counter(cli, name)
    assert seen >= 0
    until(lambda: _counter(cli, name) > seen, "the task's counter to advance on a full disk")
    assert cli("inspect", "-f", "{{.State.Status}}", name).stdout.strip() == "running"

    filler.unlink()
    until(
        lambda: (
            any(e.dropped for e in logs.read_logs(log))
            and _numbers(list(logs.read_logs(log)))[-1] > seen
        ),
        "a marker, then new lines, once space is back",
    )
    entries = list(logs.read_logs(log))
    at = next(i for i, e in enumerate(entries) if e.dropped)
    before, after = _numbers(entries[:at]), _numbers(entries[at:])
    assert after[0] > before[-1] + 1  # the lines lost are where the marker is

    shown = cli("logs", name, check=True)
    marked = [int(n) for n in MARKER.findall(shown.stderr)]
    assert marked and sum(marked) == sum(e.dropped for e in entries)
    assert f"ctrexec: {sum(marked)} bytes of {name}'s output were dropped" in shown.stderr
    assert MARKER.search(shown.stdout) is None and f"line {after[0]} " in shown.stdout
    if transport == "daemon":
        heard = (logdaemon_client.state_dir() / "logd.log").read_text()
        assert f"{log}: dropping output" in heard and f"{log}: writing again" in heard
    # inspect: the markers in the log, plus nothing pending now that writes go through.
    until(lambda: _inspect_dropped(cli, name) >= sum(marked), "inspect's count is the marked")


def _logdisk_findings(cli: Cli) -> list[dict[str, object]]:
    done = cli("doctor", "--json")
    return [f for f in json.loads(done.stdout or "[]") if f["Kind"] == "logdisk"]


def test_file_mode_blocks_on_a_full_disk_so_doctor_warns_before(
    small_disk: Path, containerd_address: str, test_image: str, made: list[str]
) -> None:
    cli = Cli(containerd_address, log_dir=small_disk)
    name = "lgd-file-full"
    made.append(name)
    cli("run", "-d", "--log-driver", "file", "--name", name, test_image, "sh", "-c", SLOW,
        check=True)  # fmt: skip
    until(lambda: next(iter(small_disk.rglob("task.log")), None) is not None, "log made")
    assert _logdisk_findings(cli) == []  # 2 MiB, nearly empty: nothing to warn of

    filler = fill(small_disk, leave=100 << 10)  # under 10% free, not yet full
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(filler.unlink)
        found = _logdisk_findings(cli)
        assert len(found) == 1, found
        assert name in str(found[0]["What"]) and found[0]["Garbage"] is False
        assert "--log-driver json-file" in str(found[0]["Fix"])
        assert cli("doctor").returncode == 1
