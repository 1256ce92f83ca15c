"""A follower of a log in a thread, for the reader's tests: what ``logs -f`` sees."""

from __future__ import annotations

import threading
from pathlib import Path

from ctrexec.logs.reader import LogEntry, read_logs


def follow_in_thread(
    path: Path, **kw: object
) -> tuple[list[LogEntry], threading.Event, threading.Thread]:
    """The entries as a follower of ``path`` gets them, the event that stops it, and its
    thread (started); ``kw`` as :func:`read_logs` takes them."""
    got: list[LogEntry] = []
    stop = threading.Event()

    def run() -> None:
        for e in read_logs(path, follow=True, stop=stop.is_set, poll_interval=0.005, **kw):  # type: ignore[arg-type]
            got.append(e)

    t = threading.Thread(target=run)
    t.start()
    return got, stop, t
