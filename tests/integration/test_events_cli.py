"""``ctrexec events``: JSON lines, docker-like filters, exit 0 on SIGINT and SIGTERM."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _cli import Cli
from _support import scratch_executor

from ctrexec.containerd.client import Client
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor
from ctrexec.testing import wait_for


@pytest.fixture
def ex(client: Client, tmp_path: Path, test_image: str) -> Iterator[Executor]:
    with scratch_executor(client, tmp_path, "evc-") as executor:
        yield executor


class EventsProcess:
    """``ctrexec events ...`` running, its JSON lines collected by a reader thread."""

    def __init__(self, cli: Cli, *args: str) -> None:
        self.proc = subprocess.Popen(
            cli.argv("events", *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def next_matching(self, want: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
        def found() -> bool:
            while not self.lines.empty():
                self.seen.append(self.lines.get())
            return any(want.items() <= e.items() for e in self.seen)

        wait_for(found, timeout=timeout, what=f"an event like {want} (seen {self.seen})")
        return next(e for e in self.seen if want.items() <= e.items())

    def live(self, ex: Executor, name: str) -> None:
        """Pause and resume ``name`` until the stream shows it: from then on it is live."""

        def shown() -> bool:
            ex.pause(name)
            ex.resume(name)
            try:
                self.next_matching({"type": "pause", "task": name}, timeout=0.5)
            except AssertionError:
                return False
            return True

        wait_for(shown, timeout=30, what="ctrexec events to be live")

    def stop(self, sig: int) -> tuple[int, str]:
        self.proc.send_signal(sig)
        _, err = self.proc.communicate(timeout=30)
        self._reader.join(timeout=30)
        return self.proc.returncode, err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_events_prints_json_lines_and_exits_zero_on_signal(
    ex: Executor, cli: Cli, test_image: str, sig: int
) -> None:
    name, other = f"evc-{sig}", f"evc-{sig}-other"
    for n in (name, other):
        ex.start_task(TaskConfig(name=n, image=test_image, command=("sleep", "1000")))
    events = EventsProcess(cli, "--filter", f"container={name}")
    try:
        events.live(ex, name)
        ex.signal(other, "SIGKILL")
        ex.signal(name, "SIGKILL")
        exit_line = events.next_matching({"type": "exit", "task": name})
    finally:
        code, err = events.stop(sig)
    assert exit_line["exit"]["code"] == 137 and exit_line["exit"]["oom_killed"] is False
    assert exit_line["namespace"] == ex.client.namespace and exit_line["time"]
    assert {e["task"] for e in events.seen} == {name}  # the filter held
    assert code == 0, err
    assert "Traceback" not in err


def test_events_refuses_bad_filters_in_one_line(cli: Cli) -> None:
    for args, words in (
        (["--filter", "since=1h"], "unknown filter 'since'"),
        (["--filter", "event=nope"], "unknown event type 'nope'"),
        (["--filter", "container"], "expected KEY=VALUE"),
    ):
        out = cli("events", *args, timeout=60)
        assert out.returncode == 125, out
        assert out.stdout == ""
        assert out.stderr.count("\n") == 1 and words in out.stderr, out.stderr
