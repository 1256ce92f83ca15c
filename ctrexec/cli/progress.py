"""How ``pull`` shows its progress: bars on a terminal, lines in a log, JSON for tools.

Each renderer is a callable taking the library's PullEvent (imported only for types),
called from the pull's worker threads, so each one serializes its writes.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from ctrexec import PullEvent

_REDRAW = 0.1  # seconds between two redraws of the bars
#: A blob's state after each step: ``done`` is stored and checked (a pull's or an
#: import's); a pulled layer is then extracted, docker's "Extracting", "Pull complete".
_STATES = {"done": "done", "extracting": "extracting", "extracted": "pull complete"}
_BAR = 30


def human(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1000
    return f"{n:.1f}GB"  # pragma: no cover


def _short(digest: str) -> str:
    return digest.split(":", 1)[-1][:12]


def missing_line(ref: str) -> str:
    """docker's line before it pulls an image ``run`` or ``create`` did not find."""
    return f"Unable to find image {ref!r} locally"


class _Blob:
    def __init__(self, total: int, start: int) -> None:
        self.total = total
        self.done = start
        self.first = start
        self.began = time.monotonic()
        self.state = "downloading"

    def speed(self) -> float:
        spent = time.monotonic() - self.began
        return (self.done - self.first) / spent if spent > 0 else 0.0


class Bars:
    """A line per blob, redrawn in place: bar, bytes of total, speed."""

    def __init__(self, out: IO[str] = sys.stderr) -> None:
        self._out = out
        self._lock = threading.Lock()
        self._blobs: dict[str, _Blob] = {}
        self._drawn = 0
        self._last = 0.0

    def __call__(self, ev: PullEvent) -> None:
        with self._lock:
            if ev.action == "missing":
                self._out.write(missing_line(ev.ref) + "\n")
            elif ev.action in ("start", "exists"):
                self._blobs[ev.digest] = _Blob(ev.total, ev.done)
                if ev.action == "exists":
                    self._blobs[ev.digest].state = "already exists"
                    self._blobs[ev.digest].done = ev.total
            elif ev.action == "progress" and ev.digest in self._blobs:
                self._blobs[ev.digest].done = ev.done
            elif ev.action in _STATES and ev.digest in self._blobs:
                self._blobs[ev.digest].done = ev.total
                self._blobs[ev.digest].state = _STATES[ev.action]
            now = time.monotonic()
            if ev.action == "progress" and now - self._last < _REDRAW:
                return
            self._last = now
            self._draw()
            if ev.action == "pulled":
                self._out.write(f"pulled {ev.ref} {ev.digest}\n")
            self._out.flush()

    def _draw(self) -> None:
        if self._drawn:
            self._out.write(f"\x1b[{self._drawn}F")
        for digest, b in self._blobs.items():
            frac = b.done / b.total if b.total else 1.0
            fill = int(frac * _BAR)
            bar = "=" * fill + (">" if fill < _BAR else "") + " " * max(0, _BAR - fill - 1)
            rate = f"{human(b.speed())}/s" if b.state == "downloading" else b.state
            line = f"{_short(digest)} [{bar}] {human(b.done)}/{human(b.total)} {rate}"
            self._out.write(f"\x1b[2K{line}\n")
        self._drawn = len(self._blobs)


class Lines:
    """One plain line per step, for logs: no bars, no control characters."""

    def __init__(self, out: IO[str] = sys.stderr) -> None:
        self._out = out
        self._lock = threading.Lock()

    def __call__(self, ev: PullEvent) -> None:
        text = {
            "missing": missing_line(ev.ref),
            "resolved": f"{ev.ref}: resolved {ev.digest}",
            "exists": f"{_short(ev.digest)}: already exists",
            "start": f"{_short(ev.digest)}: downloading {human(ev.total)}"
            + (f" (resuming at {human(ev.done)})" if ev.done else ""),
            "done": f"{_short(ev.digest)}: done",
            "extracting": f"{_short(ev.digest)}: extracting",
            "extracted": f"{_short(ev.digest)}: pull complete",
            "unpacking": f"{ev.ref}: unpacking",
            "pulled": f"{ev.ref}: pulled {ev.digest}",
        }.get(ev.action)
        if text is not None:
            with self._lock:
                self._out.write(text + "\n")
                self._out.flush()


class PushLines:
    """A push's steps as docker prints them: ``<id>: Pushing 2.1MB``, ``<id>: Pushed``,
    ``<id>: Layer already exists`` (a line each, no bars: a push is mostly waiting on
    the registry, and the lines read the same in a log)."""

    def __init__(self, out: IO[str] = sys.stderr) -> None:
        self._out = out
        self._lock = threading.Lock()

    def __call__(self, ev: PullEvent) -> None:
        text = {
            "pushing": f"The push refers to repository [{ev.ref}]",
            "partial": f"{ev.ref}: only the {ev.media_type} manifest is pushed: not every "
            "platform of its index is in the content store (import with --all-platforms)",
            "exists": f"{_short(ev.digest)}: Layer already exists",
            "start": f"{_short(ev.digest)}: Pushing {human(ev.total)}",
            "done": f"{_short(ev.digest)}: Pushed",
        }.get(ev.action)
        if text is not None:
            with self._lock:
                self._out.write(text + "\n")
                self._out.flush()


class JsonEvents:
    """One JSON object per line; byte progress at most every half second per blob."""

    def __init__(self, out: IO[str] = sys.stdout) -> None:
        self._out = out
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}

    def __call__(self, ev: PullEvent) -> None:
        with self._lock:
            if ev.action == "progress":
                now = time.monotonic()
                if now - self._last.get(ev.digest, 0.0) < 0.5:
                    return
                self._last[ev.digest] = now
            self._out.write(json.dumps(ev.to_json(), sort_keys=True) + "\n")
            self._out.flush()
