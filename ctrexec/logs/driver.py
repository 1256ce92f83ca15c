"""The logging binary that the runc v2 shim runs for a task's ``binary://`` stdio URI.

Contract (containerd 1.6, ``pkg/process.NewBinaryIO`` / ``NewBinaryCmd``):

- argv: each URI query parameter as two arguments, key then value, in random order
  (Go map iteration); :func:`ctrexec.logs.reader.log_uri` sets ``path``, ``max-size`` and
  ``max-files``;
- environment: only ``CONTAINER_ID`` and ``CONTAINER_NAMESPACE`` (no ``PATH``);
- fd 3 and fd 4: read ends of the task's stdout and stderr pipes;
- fd 5: write end of a "ready" pipe; the shim waits for it to close before it starts
  the task, so it is closed as soon as the log file is open and the readers run;
- stdout and stderr of this process go to ``/dev/null``;
- the shim keeps its own copies of the pipes' write ends until the task is deleted, so
  a task's exit does not end the streams here: a last line without a newline would
  wait in memory until the delete (and ``run --rm`` deletes the log with the task).
  A partial line is therefore written, as a partial entry, once its pipe has been
  quiet for :data:`PARTIAL_IDLE`;
- when the task is deleted, the shim closes its copies of the pipes, sends SIGTERM and
  kills this process if it is still there after 12 s; the shim's Delete call waits
  for it, so this process exits promptly. The signal lands at any instruction, so
  the handler only lets ``signal.set_wakeup_fd`` write a byte to a pipe that the
  main thread waits on with ``select``: taking a lock there (``Event.set``) deadlocks
  when the main thread holds it at that moment.

The driver never blocks the task: two threads drain the pipes whatever happens to the
disk. An entry that cannot be written is dropped and counted, never retried in a loop
that would stop the draining; a bad configuration drains to nowhere rather than
exiting, because an exit would close the pipes and kill the task with SIGPIPE.

This module also holds the writing half of the log format (:class:`LogWriter`,
:class:`LineSplitter`, :func:`encode_entry`); :mod:`ctrexec.logs.reader` re-exports them
and adds the reader and the URI builder. The split is about start-up cost, paid by
every task: this module imports only cheap standard modules (no ``json``, ``re``,
``pathlib``, ``typing``, ``hashlib``, ``urllib``, attrs), :mod:`ctrexec.defaults` and
:mod:`ctrexec.errors`, which is why it uses ``os.path`` rather than pathlib. Run through
the launcher from :func:`ctrexec.logs.launcher.write_launcher` (which also skips
``ctrexec/__init__``), it is ready in about 25 ms with about 10 MB RSS.
"""

# pathlib would import re and fnmatch: ~8 ms more per task start, so os.path it is.
# contextlib would import collections and functools (~0.2 MiB each driver): try/except.
# ruff: noqa: PTH103, PTH105, PTH117, PTH120, SIM105

from __future__ import annotations

import _thread
import os
import select
import sys
import time

from ctrexec import defaults
from ctrexec.errors import InvalidArgument

try:  # the C helper json.dumps itself uses; importing json would also pull in re
    from _json import encode_basestring as _json_string
except ImportError:  # pragma: no cover - CPython always has _json
    from json.encoder import py_encode_basestring as _json_string

# Not typing.TYPE_CHECKING: importing typing costs ~8 ms per task start, and mypy
# treats any constant named TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
    from collections.abc import Callable, Sequence
    from types import FrameType
else:
    # The C module: signal.py wraps it in enums, and enum costs each driver ~0.8 MiB.
    import _signal as signal

#: A log's rotation, under the writer's names (:mod:`ctrexec.defaults` holds them).
DEFAULT_MAX_SIZE = defaults.DEFAULT_LOG_MAX_SIZE
DEFAULT_MAX_FILES = defaults.DEFAULT_LOG_MAX_FILES
#: Longest text of one entry, in bytes; longer lines are split (docker uses 16 KiB).
MAX_LINE = 16 * 1024
STDOUT = "stdout"
STDERR = "stderr"
STREAMS = (STDOUT, STDERR)
#: Name of the console script and the prefix of generated launchers.
DRIVER_NAME = "ctrexec-logdriver"

_NS = 1_000_000_000

STDOUT_FD = 3
STDERR_FD = 4
READY_FD = 5
READ_CHUNK = 64 * 1024
#: After SIGTERM, a stream with no data for this long counts as finished. The shim
#: closes its pipe ends before signalling, so streams normally end at once; in
#: terminal mode the shim never closes the stderr pipe at all.
TERM_IDLE = 0.2
#: After SIGTERM, stop at the latest after this long (the shim kills at 12 s).
TERM_GRACE = 5.0
#: A partial line whose pipe has been quiet this long is written as a partial entry
#: (no trailing newline, as docker's json-file writes one): the shim's open write
#: ends mean no end of stream comes when the task exits. Long enough that a line
#: written in several quick writes stays one entry.
PARTIAL_IDLE = 0.05
#: The byte a finished pump writes to the main thread's wake-up pipe; signals write
#: their number there, and no signal is numbered 0.
_PUMP_DONE = b"\0"

EXIT_OK = 0
EXIT_BAD_CONFIG = 2


def format_time(time_ns: int) -> str:
    """RFC 3339 UTC with nine fraction digits: fixed width, so it also sorts as text."""
    secs, frac = divmod(time_ns, _NS)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{frac:09d}Z"


def encode_entry(stream: str, message: str | bytes, time_ns: int) -> bytes:
    """One line of docker's json-file format, keys in docker's order (log, stream, time).

    Byte-for-byte what ``json.dumps(..., ensure_ascii=False, separators=(",", ":"))``
    gives, without importing json.
    """
    if isinstance(message, bytes):
        message = message.decode("utf-8", "replace")
    line = (
        '{"log":'
        + _json_string(message)
        + ',"stream":'
        + _json_string(stream)
        + ',"time":"'
        + format_time(time_ns)
        + '"}\n'
    )
    # "replace" only matters for str messages holding lone surrogates.
    return line.encode("utf-8", "replace")


#: The key a marker entry adds to docker's three: the bytes of output lost just before
#: it (the task's own bytes, not the size of the JSON entries they would have made).
#: Tools that read docker's format ignore a key they do not know.
DROPPED_KEY = "dropped"


def marker_text(dropped_bytes: int, reason: str) -> str:
    """The line a reader sees where output was lost (the one wording of it)."""
    return f"[ctrexec: {dropped_bytes} bytes of output dropped here: {reason}]\n"


def encode_marker(dropped_bytes: int, reason: str, time_ns: int) -> bytes:
    """A stderr entry saying ``dropped_bytes`` bytes of entries were lost before it."""
    entry = encode_entry(STDERR, marker_text(dropped_bytes, reason), time_ns)
    return entry[:-2] + f',"{DROPPED_KEY}":{dropped_bytes}}}\n'.encode()


class LineSplitter:
    """Cut a stream of pipe reads into entry messages, as docker does.

    Each complete line (newline kept) is one message; a line whose text is longer than
    ``max_line`` bytes is cut into ``max_line`` pieces, moved back to a UTF-8 character boundary
    so no character is torn; :meth:`flush` returns what is left when the stream ends.
    """

    def __init__(self, max_line: int = MAX_LINE) -> None:
        if max_line < 4:
            raise InvalidArgument(f"max_line must be at least 4 bytes, got {max_line}")
        self._max = max_line
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add bytes read from the pipe; return the messages now complete."""
        self._buf += chunk
        out: list[bytes] = []
        start = 0
        buf = self._buf
        while True:
            nl = buf.find(b"\n", start, start + self._max + 1)
            if nl >= 0:
                out.append(bytes(buf[start : nl + 1]))
                start = nl + 1
                continue
            if len(buf) - start <= self._max:
                break  # the next byte may still be this line's newline
            cut = start + self._max
            # Step back over UTF-8 continuation bytes (at most 3) to a character start.
            back = cut
            while back > cut - 3 and (buf[back] & 0xC0) == 0x80:
                back -= 1
            if (buf[back] & 0xC0) != 0x80:
                cut = back
            out.append(bytes(buf[start:cut]))
            start = cut
        del buf[:start]
        return out

    @property
    def pending(self) -> bool:
        """Whether an unterminated line is waiting for more bytes."""
        return bool(self._buf)

    def flush(self) -> list[bytes]:
        """The unterminated rest of the stream, if any (end of stream, or a quiet pipe)."""
        if not self._buf:
            return []
        rest = bytes(self._buf)
        self._buf.clear()
        return [rest]


class LogWriter:
    """Append entries to ``path`` with size-bounded rotation; never raises on I/O errors.

    The driver's two reader threads (stdout, stderr) share one writer; a lock keeps
    lines whole and rotation single. A failed open or write drops the entry and counts
    it (:attr:`dropped` entries, :attr:`dropped_bytes` bytes of the task's output, the
    entries' text and not their JSON) instead of raising: the driver must keep
    draining the task's pipes whatever the disk does, or the task blocks on a full pipe.
    After a failure, reopening is retried at most every ``retry_interval`` seconds.

    A full disk must not lose output silently: the bytes dropped since the last marker
    (:attr:`unmarked`) are written as a marker entry (:func:`encode_marker`) before the
    next entry that fits, so the gap is marked where it is and counted. ``notify``, if
    given, hears of the first drop of a run and of the resume (the daemon's own log).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_size: int = DEFAULT_MAX_SIZE,
        max_files: int = DEFAULT_MAX_FILES,
        clock: Callable[[], int] = time.time_ns,
        retry_interval: float = 1.0,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        path = os.fspath(path)
        if not os.path.isabs(path):
            raise InvalidArgument(f"log path must be absolute: {path!r}")
        check_limits(max_size, max_files)
        self._path = path
        self._max_size = max_size
        self._max_files = max_files
        self._clock = clock
        self._retry_interval = retry_interval
        self._lock = _thread.allocate_lock()
        self._fd: int | None = None
        self._size = 0
        self._retry_at = 0.0
        self._closed = False
        self.dropped = 0
        self.dropped_bytes = 0
        self.written = 0
        self.unmarked = 0
        self.last_error: OSError | None = None
        self._notify = notify

    @property
    def path(self) -> str:
        return self._path

    def open(self) -> bool:
        """Open (creating parent directories) now rather than at the first write.

        The driver calls it before telling the shim it is ready, so a path that cannot
        be written shows up at once in :attr:`last_error`. Returns whether it is open.
        """
        with self._lock:
            return self._ensure_open()

    def write(self, stream: str, message: str | bytes, time_ns: int | None = None) -> bool:
        """Append one entry; return False if it was dropped."""
        data = encode_entry(stream, message, self._clock() if time_ns is None else time_ns)
        # Counted in bytes of the task's output (the message), not of its JSON entry:
        # what the marker and ``inspect``'s LogDroppedBytes say was lost.
        size = (
            len(message) if isinstance(message, bytes) else len(message.encode("utf-8", "replace"))
        )
        with self._lock:
            if self._closed or not self._ensure_open():
                return self._drop(size)
            try:
                if self.unmarked:  # at the entry's time, so times stay in order
                    self._append(self._marker(self._clock() if time_ns is None else time_ns))
                    self._resumed()
                self._append(data)
            except OSError as exc:
                self._fail(exc)
                return self._drop(size)
            self.written += 1
            return True

    def close(self) -> None:
        """Close the file, marking a last gap if the disk now takes it; later writes
        are dropped and counted."""
        with self._lock:
            if self.unmarked and not self._closed and self._ensure_open():
                try:
                    self._append(self._marker(self._clock()))
                    self._resumed()
                except OSError as exc:
                    self.last_error = exc
            self._closed = True
            self._close_fd()

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals; all called with the lock held

    def _append(self, data: bytes) -> None:
        if self._size > 0 and self._size + len(data) > self._max_size:
            self._rotate()
        self._write_all(data)

    def _marker(self, time_ns: int) -> bytes:
        err = self.last_error
        reason = (err.strerror or str(err)) if err is not None else "the log could not be written"
        return encode_marker(self.unmarked, reason, time_ns)

    def _resumed(self) -> None:
        if self._notify is not None:
            self._notify(f"{self._path}: writing again after dropping {self.unmarked} bytes")
        self.unmarked = 0

    def _ensure_open(self) -> bool:
        if self._fd is not None:
            return True
        if time.monotonic() < self._retry_at:
            return False
        try:
            os.makedirs(os.path.dirname(self._path), mode=0o755, exist_ok=True)
            fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        except OSError as exc:
            self._fail(exc)
            return False
        self._fd = fd
        self._size = os.fstat(fd).st_size
        return True

    def _write_all(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        written = 0
        try:
            while written < len(data):
                written += os.write(self._fd, view[written:])
        except OSError:
            if written:
                # Cut the torn line off (best effort) so it cannot swallow the next one.
                try:
                    os.ftruncate(self._fd, self._size)
                except OSError:
                    self._size += written
            raise
        self._size += written

    def _rotate(self) -> None:
        if self._max_files == 1:
            assert self._fd is not None
            os.ftruncate(self._fd, 0)
            self._size = 0
            return
        self._close_fd()
        for i in range(self._max_files - 1, 0, -1):
            src = self._path if i == 1 else f"{self._path}.{i - 1}"
            try:
                os.replace(src, f"{self._path}.{i}")
            except FileNotFoundError:
                continue
        if not self._ensure_open():
            raise self.last_error or OSError("cannot reopen log file after rotation")

    def _fail(self, exc: OSError) -> None:
        self.last_error = exc
        self._close_fd()
        self._retry_at = time.monotonic() + self._retry_interval

    def _drop(self, size: int) -> bool:
        if not self.unmarked and self._notify is not None and not self._closed:
            self._notify(f"{self._path}: dropping output: {self.last_error}")
        self.dropped += 1
        self.dropped_bytes += size
        self.unmarked += size
        return False

    def _close_fd(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            close_quietly(fd)


def close_quietly(fd: int) -> None:
    """Close ``fd``, whatever state it is in: the driver and the daemon must drain on."""
    try:
        os.close(fd)
    except OSError:
        pass


def wakeup_pipe(*caught: int) -> tuple[int, int]:
    """A non-blocking pipe that gets each ``caught`` signal's number; SIGHUP is ignored.

    ``signal.set_wakeup_fd`` makes the C-level handler write the number, which is safe
    at any instruction; the Python-level handler does nothing at all, so there is no
    lock it could wait for. The reader learns which signal came from the bytes.
    """
    read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    for sig in caught:
        signal.signal(sig, _ignore_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return read_fd, write_fd


def _ignore_signal(signum: int, frame: FrameType | None) -> None:
    """Installed so a caught signal does not kill; the wake-up byte carries the news."""


def check_limits(max_size: int, max_files: int) -> None:
    """Reject limits that would make rotation meaningless (shared with log_uri)."""
    if max_size < 1:
        raise InvalidArgument(f"max_size must be positive, got {max_size}")
    if max_files < 1:
        raise InvalidArgument(f"max_files must be at least 1, got {max_files}")


# --------------------------------------------------------------------------- driver


def parse_args(argv: Sequence[str]) -> tuple[str, int, int]:
    """``(path, max_size, max_files)`` from key/value argument pairs in any order.

    Keys may also be written ``--key value`` or ``--key=value`` for manual runs.
    Unknown keys are ignored, so an older driver accepts a newer URI.
    """
    pairs: dict[str, str] = {}
    args = list(argv)
    i = 0
    while i < len(args):
        key = args[i].lstrip("-")
        if "=" in key and args[i].startswith("--"):
            key, value = key.split("=", 1)
            i += 1
        else:
            if i + 1 >= len(args):
                raise InvalidArgument(f"argument {args[i]!r} has no value")
            value = args[i + 1]
            i += 2
        pairs[key] = value
    path = pairs.get("path", "")
    if not path or not os.path.isabs(path):
        raise InvalidArgument(f"an absolute log path is required, got {path!r}")
    try:
        max_size = int(pairs.get("max-size", DEFAULT_MAX_SIZE))
        max_files = int(pairs.get("max-files", DEFAULT_MAX_FILES))
    except ValueError as exc:
        raise InvalidArgument(f"bad max-size or max-files: {exc}") from exc
    return path, max_size, max_files


class _Pump:
    """Drains one pipe into the writer, line by line, until end of stream, in a thread.

    A bare ``_thread``: the threading module (with functools and collections) costs
    each driver ~0.7 MiB, and a pump needs no join, name or daemon flag.
    """

    def __init__(self, fd: int, stream: str, writer: LogWriter | None, wake_fd: int) -> None:
        self.fd = fd
        self.stream = stream
        self.writer = writer
        self.wake_fd = wake_fd
        self.finished = False
        self.last_data = time.monotonic()
        self.dropped = 0
        self._splitter = LineSplitter()
        # Held while a chunk is split and written, so flush_rest() from the main
        # thread never interleaves with it.
        self._lock = _thread.allocate_lock()

    def start(self) -> None:
        _thread.start_new_thread(self.run, ())

    def run(self) -> None:
        try:
            self._drain()
            self.flush_rest()
        finally:
            close_quietly(self.fd)
            self.finished = True
            try:
                os.write(self.wake_fd, _PUMP_DONE)
            except OSError:
                pass

    def _drain(self) -> None:
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        while True:
            if self._splitter.pending and not poller.poll(PARTIAL_IDLE * 1000):
                self.flush_rest()  # quiet pipe: the task may have exited mid-line
                continue
            try:
                data = os.read(self.fd, READ_CHUNK)
            except OSError:
                return
            if not data:
                return
            now = time.time_ns()
            self.last_data = time.monotonic()
            with self._lock:
                for piece in self._splitter.feed(data):
                    self._emit(piece, now)

    def flush_rest(self) -> None:
        """Write the unterminated last line as a partial entry (quiet pipe, end, SIGTERM)."""
        with self._lock:
            for piece in self._splitter.flush():
                self._emit(piece, time.time_ns())

    def _emit(self, piece: bytes, now: int) -> None:
        if self.writer is None:
            self.dropped += 1
            return
        try:
            self.writer.write(self.stream, piece, now)
        except Exception:  # a bug here must not stop the draining
            self.dropped += 1


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


class _Wakeup:
    """The main thread's wake-up pipe (:func:`wakeup_pipe`): SIGTERM and finished
    pumps each write a byte."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = wakeup_pipe(signal.SIGTERM)
        self.terminated = False

    def wait(self, timeout: float) -> None:
        """Sleep until a byte arrives or ``timeout`` passes; note a SIGTERM."""
        select.select([self.read_fd], [], [], timeout)
        try:
            while data := os.read(self.read_fd, 64):
                self.terminated = self.terminated or signal.SIGTERM in data
        except (BlockingIOError, InterruptedError):
            pass


def _await_end(pumps: Sequence[_Pump], wakeup: _Wakeup) -> None:
    """Wait until both streams end, or after SIGTERM until they end or go quiet."""
    while not all(p.finished for p in pumps) and not wakeup.terminated:
        wakeup.wait(5.0)
    if not wakeup.terminated:
        return
    deadline = time.monotonic() + TERM_GRACE
    while not all(p.finished for p in pumps) and time.monotonic() < deadline:
        now = time.monotonic()
        if all(p.finished or now - p.last_data >= TERM_IDLE for p in pumps):
            break
        wakeup.wait(0.05)
    for pump in pumps:
        if not pump.finished:
            pump.flush_rest()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the driver until both streams end (or SIGTERM and they go quiet)."""
    # Check the inherited fds before anything opens one: a missing fd 3, 4 or 5
    # would otherwise be reused by the wake-up pipe or the log file itself.
    present = {fd for fd in (STDOUT_FD, STDERR_FD) if _is_open(fd)}
    ready_open = _is_open(READY_FD)
    wakeup = _Wakeup()
    status = EXIT_OK
    writer: LogWriter | None = None
    try:
        path, max_size, max_files = parse_args(sys.argv[1:] if argv is None else argv)
        writer = LogWriter(path, max_size=max_size, max_files=max_files)
        writer.open()  # failures are kept in last_error and retried on later writes
    except InvalidArgument as exc:
        print(f"{DRIVER_NAME}: {exc}; discarding output", file=sys.stderr)
        status = EXIT_BAD_CONFIG
    pumps = [
        _Pump(fd, stream, writer, wakeup.write_fd)
        for fd, stream in ((STDOUT_FD, STDOUT), (STDERR_FD, STDERR))
        if fd in present
    ]
    for pump in pumps:
        pump.start()
    if ready_open:
        close_quietly(READY_FD)
    _await_end(pumps, wakeup)

    dropped = sum(p.dropped for p in pumps)
    if writer is not None:
        writer.close()
        dropped += writer.dropped
        if writer.last_error is not None:
            print(f"{DRIVER_NAME}: last write error: {writer.last_error}", file=sys.stderr)
    if dropped:
        print(f"{DRIVER_NAME}: dropped {dropped} entries", file=sys.stderr)
    # Python's exit restores SIG_DFL for handled signals (not ignored ones): the shim's
    # SIGTERM may still be on its way, and would turn a clean exit into a kill.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return status


if __name__ == "__main__":
    sys.exit(main())
