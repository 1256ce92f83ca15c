"""Task logs: written by a driver process that the shim owns, read back by anyone.

Why a driver: with containerd's ``fifo`` stdio the *client* copies the task's output,
so a client that exits leaves the pipes full and the task blocks. With a
``binary://`` stdio URI the runc v2 shim starts a logging binary itself and hands it
the task's stdout and stderr pipes; the logs then outlive ctrexec and nothing waits on
the client. :mod:`ctrexec.logs.driver` is that binary. This module is the public face:
the format, the writer (re-exported from the driver, which must start cheaply), the
one reader of every driver's logs (:func:`read_logs`), and the URI builder (whose
launcher file :mod:`ctrexec.logs.launcher` writes).

Format: docker's ``json-file`` format, one JSON object per line,
``{"log": "<text>", "stream": "stdout"|"stderr", "time": "<RFC 3339, ns, UTC>"}``,
so tools that read docker's logs (log shippers, ``jq`` recipes) read these too.
As in docker, ``log`` keeps the line's newline; a line whose text is longer than
:data:`MAX_LINE` bytes is split into several entries and only the last carries the
newline; a line without a newline yet is written as is (a partial entry, as docker
marks one: no trailing newline in ``log``) when the stream ends, on SIGTERM, or once
its pipe has been quiet for :data:`ctrexec.logs.driver.PARTIAL_IDLE`; the rest of that
line, if any comes, follows in later entries. Readers join the pieces by printing
the messages one after the other, as ``docker logs`` does.
Bytes that are not UTF-8 become U+FFFD. ``time`` always has nine fraction digits.

Rotation follows docker too: the current file is ``path``; rotated files are
``path.1`` (newest) to ``path.<max_files-1>`` (oldest). Every file holds at most
``max_size`` bytes unless one entry alone is larger, so the total stays within
``max_size * max_files`` (plus one entry).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Unpack

import attrs

from ctrexec.errors import CtrexecError, FailedPrecondition, InvalidArgument
from ctrexec.logs import backward, modes
from ctrexec.logs import client as logclient
from ctrexec.logs.driver import (
    DEFAULT_MAX_FILES,
    DEFAULT_MAX_SIZE,
    DRIVER_NAME,
    DROPPED_KEY,
    MAX_LINE,
    PARTIAL_IDLE,
    STDERR,
    STDOUT,
    STREAMS,
    LineSplitter,
    LogWriter,
    encode_entry,
    encode_marker,
    format_time,
)
from ctrexec.logs.launcher import DEFAULT_LAUNCHER_DIR, log_uri, write_launcher

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Generator, Iterator
    from datetime import datetime

    from ctrexec.paths import StrPath

__all__ = [
    "DEFAULT_LAUNCHER_DIR",
    "DEFAULT_MAX_FILES",
    "DEFAULT_MAX_SIZE",
    "DRIVER_NAME",
    "EXIT_SETTLE",
    "MAX_LINE",
    "OUTPUT",
    "STDERR",
    "STDOUT",
    "STREAMS",
    "LineSplitter",
    "LogEntry",
    "LogWriter",
    "decode_entry",
    "dropped_bytes",
    "encode_entry",
    "encode_marker",
    "format_time",
    "log_uri",
    "parse_time",
    "read_logs",
    "read_task_logs",
    "rotated_paths",
    "write_launcher",
]

#: How long a log may still grow after its task has exited, for followers that stop
#: at the exit: the driver writes a last line without a newline once its pipe has
#: been quiet for PARTIAL_IDLE (the shim never ends the stream at the exit); the rest
#: is margin for a busy host.
EXIT_SETTLE = PARTIAL_IDLE + 0.25

#: The stream of a raw log's entries (``file`` driver): stdout and stderr, merged.
OUTPUT = "output"

_NS = 1_000_000_000
#: How far back past ``since`` a read from the end goes before it stops. One writer
#: stamps and writes a log's entries in file order, except where its stdout and
#: stderr readers race for the file (a stamp taken, then the lock waited for): a few
#: microseconds out of order, milliseconds on a loaded host. A forward read filters
#: every entry; this bound lets a backward one stop and print the same.
SINCE_SLACK_NS = 1_000_000_000
_READ_CHUNK = 1024 * 1024


# --------------------------------------------------------------------------- format


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 (proleptic Gregorian); avoids importing datetime/calendar."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def parse_time(text: str) -> int:
    """Nanoseconds since the epoch from RFC 3339 (``Z`` or ``±HH:MM``, any fraction).

    Docker trims trailing zeros from the fraction and this module does not; both parse.
    Hand-written because ``datetime`` keeps only microseconds.
    """
    try:
        return _parse_rfc3339(text)
    except (ValueError, IndexError) as exc:
        raise InvalidArgument(f"not an RFC 3339 time: {text!r}") from exc


def _parse_rfc3339(text: str) -> int:
    if len(text) == 30 and text[19] == "." and text[29] == "Z":  # as format_time writes
        digits = text[20:29]
        if digits.isdigit():
            return _whole_seconds(text[:19]) * _NS + int(digits)
    if len(text) < 20:
        raise ValueError(text)
    secs = _whole_seconds(text[:19])
    rest = text[19:]
    frac = 0
    if rest.startswith("."):
        end = 1
        while end < len(rest) and rest[end].isdigit():
            end += 1
        digits = rest[1:end]
        if not digits:
            raise ValueError(text)
        frac = int(digits[:9].ljust(9, "0"))
        rest = rest[end:]
    if rest in ("Z", "z"):
        offset = 0
    elif len(rest) == 6 and rest[0] in "+-" and rest[3] == ":":
        offset = (int(rest[1:3]) * 3600 + int(rest[4:6]) * 60) * (1 if rest[0] == "+" else -1)
    else:
        raise ValueError(text)
    return (secs - offset) * _NS + frac


@functools.lru_cache(maxsize=64)
def _whole_seconds(text: str) -> int:
    """Seconds since the epoch of ``YYYY-MM-DDTHH:MM:SS``. Cached: a log's entries come
    many to a second, and this was most of the cost of reading a log (issue 37)."""
    if len(text) != 19 or text[4] != "-" or text[10] not in "Tt" or text[13] != ":":
        raise ValueError(text)
    return (
        _days_from_civil(int(text[0:4]), int(text[5:7]), int(text[8:10])) * 86400
        + int(text[11:13]) * 3600
        + int(text[14:16]) * 60
        + int(text[17:19])
    )


@attrs.frozen
class LogEntry:
    """One log entry as read back: stream, message (newline kept) and time in ns.

    Time is kept as integer nanoseconds because ``datetime`` would drop the three
    digits that order entries written within one microsecond.
    """

    stream: str
    message: str
    time_ns: int
    #: For a marker entry, the bytes of output lost just before it (a full disk).
    dropped: int = 0

    @property
    def time(self) -> str:
        """The entry's time as written in the file (RFC 3339, nanoseconds, UTC)."""
        return format_time(self.time_ns)

    @property
    def stderr(self) -> bool:
        """True for the task's stderr (and a marker entry): where a reader that
        replays the log, as ``logs`` does, writes the message."""
        return self.stream == STDERR

    @property
    def partial(self) -> bool:
        """True when the message does not end a line (a split long line, or a last line)."""
        return not self.message.endswith("\n")


_decode_json = json.JSONDecoder().decode


def decode_entry(line: bytes | str) -> LogEntry | None:
    """Parse one line; ``None`` for anything that is not a well-formed entry.

    Readers skip bad lines instead of failing: a torn line after a crash must not hide
    every line that follows it.
    """
    try:
        if isinstance(line, bytes) and line[:2] == b'{"':  # json.loads's own reading of it,
            obj = _decode_json(line.decode("utf-8", "surrogatepass"))  # minus its guessing
        else:
            obj = json.loads(line)
        if not isinstance(obj, dict):
            return None
        message, stream, when = obj["log"], obj["stream"], obj["time"]
        if not (isinstance(message, str) and isinstance(stream, str) and isinstance(when, str)):
            return None
        dropped = obj.get(DROPPED_KEY, 0)
        if not isinstance(dropped, int) or dropped < 0:
            dropped = 0
        return LogEntry(stream, message, parse_time(when), dropped)
    except (ValueError, KeyError, InvalidArgument):
        return None


# --------------------------------------------------------------------------- reader


def rotated_paths(path: StrPath) -> list[str]:
    """Rotated files of ``path``, oldest first (``path.N`` … ``path.1``)."""
    current = Path(path)
    prefix = current.name + "."
    try:
        names = [child.name for child in current.parent.iterdir()]
    except FileNotFoundError:
        return []
    found = [
        (int(name[len(prefix) :]), name)
        for name in names
        if name.startswith(prefix) and name[len(prefix) :].isdigit()
    ]
    return [str(current.parent / name) for _, name in sorted(found, reverse=True)]


def _identity(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def _stat_identity(path: str) -> tuple[int, int] | None:
    try:
        return _identity(Path(path).stat())
    except FileNotFoundError:
        return None


class _Cursor:
    """Reads a rotating log in order: the rotated files, then the current one, then more.

    The current file is tracked by inode. When ``path`` names another inode the writer
    has rotated: the old file (still open) is read to its end, then the rotated files
    newer than it, then the new current file. Lines are lost only if the writer rotates
    ``max_files - 1`` times between two polls.
    """

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd: int | None = None
        self._ident: tuple[int, int] | None = None
        self._pos = 0
        self._buf = b""
        # Identity of the last file read, so a re-scan skips what was already yielded.
        self._last: tuple[int, int] | None = None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def start(self) -> Iterator[bytes]:
        """All lines present now, oldest first."""
        yield from self._switch(after=None)

    def poll(self) -> Iterator[bytes]:
        """Lines written since the last call, following rotation."""
        if self._fd is None:
            yield from self._switch(after=self._last)
            return
        yield from self._read_new()
        current = _stat_identity(self._path)
        if current is not None and current != self._ident:
            yield from self._read_new()  # what was written before the rename
            yield from self._switch(after=self._ident)

    def _switch(self, after: tuple[int, int] | None) -> Iterator[bytes]:
        """Open the current file, then yield rotated files newer than ``after``, then it."""
        self.close()
        self._buf = b""
        self._pos = 0
        try:
            self._fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            self._fd = None
        self._ident = _identity(os.fstat(self._fd)) if self._fd is not None else None
        rotated = rotated_paths(self._path)
        idents = [_stat_identity(p) for p in rotated]
        begin = 0
        if after is not None and after in idents:
            begin = idents.index(after) + 1
        for p, ident in zip(rotated[begin:], idents[begin:], strict=True):
            if ident is None or ident == self._ident:
                break  # rotated meanwhile: the current file comes last, below
            yield from _read_whole(p)
            self._last = ident
        if self._fd is not None:
            self._last = self._ident
            yield from self._read_new()

    def start_backward(self) -> Generator[bytes, None, None]:
        """The lines :meth:`start` would yield, newest first, read from the end by blocks.

        The cursor is left where :meth:`start` leaves it (at the current file's end, its
        unterminated rest kept) before the first line is asked for, so ``poll`` goes on
        from there however few lines the caller takes. The files are the same ones:
        the current file opened first, then the rotated ones older than it.
        """
        self.close()
        self._buf, self._pos = b"", 0
        try:
            self._fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            self._fd = None
        self._ident = _identity(os.fstat(self._fd)) if self._fd is not None else None
        older: list[str] = []
        for p in rotated_paths(self._path):
            ident = _stat_identity(p)
            if ident is None or ident == self._ident:
                break  # as start(): rotated meanwhile, the current file comes last
            older.append(p)
            self._last = ident
        newest: Iterator[bytes] = iter(())
        if self._fd is not None:
            self._last = self._ident
            size = os.fstat(self._fd).st_size
            newest = backward.pieces(self._fd, size)
            self._buf, self._pos = next(newest), size
        return self._backward(newest, older[::-1])

    @staticmethod
    def _backward(newest: Iterator[bytes], older: list[str]) -> Generator[bytes, None, None]:
        yield from newest
        for path in older:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                lines = backward.pieces(fd, os.fstat(fd).st_size)
                next(lines)  # a rotated file's unterminated rest: start() skips it too
                yield from lines
            finally:
                os.close(fd)

    def rest(self) -> bytes:
        """The current file's unterminated last line, taken (raw logs print it as is)."""
        rest, self._buf = self._buf, b""
        return rest

    def _read_new(self) -> Iterator[bytes]:
        if self._fd is None:
            return
        if os.fstat(self._fd).st_size < self._pos:  # truncated in place (max_files=1)
            self._pos = 0
            self._buf = b""
        while True:
            chunk = os.pread(self._fd, _READ_CHUNK, self._pos)
            if not chunk:
                return
            self._pos += len(chunk)
            data = self._buf + chunk
            lines = data.split(b"\n")
            self._buf = lines.pop()
            yield from lines


def _read_whole(path: str) -> Iterator[bytes]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        buf = b""
        while chunk := os.read(fd, _READ_CHUNK):
            lines = (buf + chunk).split(b"\n")
            buf = lines.pop()
            yield from lines
    finally:
        os.close(fd)


def dropped_bytes(
    driver: str, path: str | os.PathLike[str], *, daemon_dir: Path | None = None
) -> int:
    """Bytes of a task's output lost to a full log disk: ``inspect``'s ``LogDroppedBytes``.

    The markers in the log files kept (a rotated-away file takes its markers with
    it), plus what the shared log daemon has dropped and not yet marked because the
    disk is still full (asked of it, if one runs; a per-task log process keeps its
    count to itself until it can write the marker). ``file`` mode drops nothing: the
    shim blocks instead (see :mod:`ctrexec.logs.modes`); ``none`` keeps nothing.
    """
    if driver != modes.JSON_FILE:
        return 0
    total = 0
    for name in [*rotated_paths(path), os.fspath(path)]:
        if not Path(name).is_file():
            continue  # missing, or not a log at all (a device would read for ever)
        for line in _read_whole(name):
            if _MARKER_BYTES in line and (entry := decode_entry(line)) is not None:
                total += entry.dropped
    try:
        reply = logclient.request(
            {"op": "dropped", "log": os.fspath(path)}, start=False, timeout=2.0, where=daemon_dir
        )
    except (CtrexecError, OSError, ValueError):
        reply = None  # an older daemon, or a busy one: what the files say
    pending = reply.get("pending", 0) if reply else 0
    return total + (pending if isinstance(pending, int) else 0)


_MARKER_BYTES = f'"{DROPPED_KEY}":'.encode()


def _instant_ns(value: datetime | int | None, name: str) -> int | None:
    """Exact ns for an aware datetime (``timestamp()`` is a float and can round)."""
    if value is None or isinstance(value, int):
        return value
    if value.tzinfo is None:
        raise InvalidArgument(f"{name} must be timezone-aware (or nanoseconds since the epoch)")
    u = value.utctimetuple()
    days = _days_from_civil(u.tm_year, u.tm_mon, u.tm_mday)
    secs = days * 86400 + u.tm_hour * 3600 + u.tm_min * 60 + u.tm_sec
    return secs * _NS + value.microsecond * 1000


def read_logs(
    path: StrPath,
    *,
    driver: str = modes.JSON_FILE,
    follow: bool = False,
    since: datetime | int | None = None,
    tail: int | None = None,
    streams: Collection[str] = STREAMS,
    until: datetime | int | None = None,
    stop: Callable[[], bool] | None = None,
    exited: Callable[[], bool] | None = None,
    poll_interval: float = 0.1,
    wait: Callable[[float], object] = time.sleep,
) -> Iterator[LogEntry]:
    """Entries of a task's log as its ``driver`` wrote it, oldest first: the one reader.

    ``json-file`` (the default) reads a rotating log across ``path.N`` … ``path.1``,
    ``path``; ``file`` reads the shim's plain file: each line is an :data:`OUTPUT`
    entry with time 0, and an unterminated line comes as it is, with no newline,
    whenever a read reaches the end (its rest follows as another entry); ``none`` has
    nothing to read and says so, in docker's words (FailedPrecondition), as does
    ``since`` for a driver with no timestamps (InvalidArgument): at the call, not later.

    ``since``/``until`` (aware datetimes or epoch ns, inclusive) and ``streams`` filter first;
    ``tail`` then keeps the last N of the entries present now. Either makes the read start from
    the end (:mod:`ctrexec.logs.backward`), so it costs what it yields, not what the log holds
    (``since``: back to :data:`SINCE_SLACK_NS` before it). With ``follow``, entries written
    later are yielded as they appear (polling every ``poll_interval`` seconds, across rotations;
    ``wait`` pauses between polls, and an event's ``wait`` lets its setter cut a pause short)
    until ``stop()`` returns true, and then once more, so whatever was written before ``stop()``
    said so is yielded; without ``stop`` it follows until the caller stops iterating.
    ``exited()`` (the task's exit) stops it too, once true for :data:`EXIT_SETTLE`: the log is
    whole only then, as a last line with no newline is written after the exit. A missing log
    yields nothing (or, when following, waits for it). Lines that are not entries are skipped.
    """
    modes.check_driver(driver)
    if driver == modes.NONE:
        raise FailedPrecondition("configured logging driver does not support reading")
    if since is not None and "timestamps" not in modes.FEATURES[driver]:
        raise InvalidArgument(f"the {driver} log driver keeps no timestamps to filter by")
    if tail is not None and tail < 0:
        raise InvalidArgument(f"tail must be >= 0, got {tail}")
    cursor = _Cursor(os.fspath(path))  # opens nothing until it is read
    since_ns, until_ns = _instant_ns(since, "since"), _instant_ns(until, "until")
    wanted = frozenset(streams)

    def select(lines: Iterator[bytes]) -> Iterator[LogEntry]:
        if driver == modes.FILE:
            return _raw_entries(lines, cursor, until_ns)
        return _json_entries(lines, wanted, (since_ns, until_ns))

    def present() -> Iterator[LogEntry]:
        if tail is None and since_ns is None:
            return select(cursor.start())  # everything: forward is the cheaper way
        if driver == modes.FILE:  # (no since: refused above; every time is 0)
            return _last_raw(cursor, tail if until_ns is None or until_ns >= 0 else 0)
        return _last_json(cursor.start_backward(), wanted, (since_ns, until_ns), tail)

    stop, pause = _settled(stop, exited), functools.partial(wait, poll_interval)
    return _entries(cursor, present, select, follow=follow, stop=stop, pause=pause)


def _settled(
    stop: Callable[[], bool] | None, exited: Callable[[], bool] | None
) -> Callable[[], bool] | None:
    """``stop``, or true once ``exited()`` has been true for :data:`EXIT_SETTLE`."""
    if exited is None:
        return stop
    since: list[float] = []

    def settled() -> bool:
        if stop is not None and stop():
            return True
        if not since and exited():
            since.append(time.monotonic())
        return bool(since) and time.monotonic() - since[0] >= EXIT_SETTLE

    return settled


class _ReadOptions(TypedDict, total=False):
    """What :func:`read_task_logs` passes on to :func:`read_logs`."""

    follow: bool
    since: datetime | int | None
    tail: int | None
    stop: Callable[[], bool] | None
    poll_interval: float
    wait: Callable[[float], object]


def read_task_logs(
    driver: str, path: StrPath, **options: Unpack[_ReadOptions]
) -> Iterator[LogEntry]:
    """Deprecated for one release: :func:`read_logs` (the name the package's callers use),
    with the driver as its keyword. Issue 38: one name per operation."""
    text = "read_task_logs is deprecated: use read_logs(path, driver=driver)"
    warnings.warn(text, DeprecationWarning, stacklevel=2)
    return read_logs(path, driver=driver, **options)


def _entries(
    cursor: _Cursor,
    present: Callable[[], Iterator[LogEntry]],
    select: Callable[[Iterator[bytes]], Iterator[LogEntry]],
    *,
    follow: bool,
    stop: Callable[[], bool] | None,
    pause: Callable[[], object],
) -> Iterator[LogEntry]:
    """The generator behind :func:`read_logs`, whose checks so come at the call."""
    try:
        yield from present()
        if not follow:
            return
        while stop is None or not stop():
            got = False
            for entry in select(cursor.poll()):
                got = True
                yield entry
            if not got:
                pause()
        yield from select(cursor.poll())
    finally:
        cursor.close()


def _json_entries(
    lines: Iterator[bytes], wanted: frozenset[str], bounds: tuple[int | None, int | None]
) -> Iterator[LogEntry]:
    since_ns, until_ns = bounds
    for line in lines:
        entry = decode_entry(line) if line else None
        if entry is None or entry.stream not in wanted:
            continue
        if since_ns is not None and entry.time_ns < since_ns:
            continue
        if until_ns is None or entry.time_ns <= until_ns:
            yield entry


def _last_json(
    lines: Generator[bytes, None, None],
    wanted: frozenset[str],
    bounds: tuple[int | None, int | None],
    tail: int | None,
) -> Iterator[LogEntry]:
    """The entries a forward read would keep for ``since``/``until``/``tail``, from lines
    newest first: read back only until ``tail`` entries are kept, or to an entry older
    than ``since`` by more than :data:`SINCE_SLACK_NS`."""
    kept: list[LogEntry] = []
    since_ns, until_ns = bounds
    floor = None if since_ns is None else since_ns - SINCE_SLACK_NS
    with contextlib.closing(lines):  # closes the rotated file being read, if any
        for line in lines if tail != 0 else ():
            entry = decode_entry(line) if line else None
            if entry is None:
                continue
            if floor is not None and entry.time_ns < floor:
                break
            if entry.stream not in wanted or (since_ns is not None and entry.time_ns < since_ns):
                continue
            if until_ns is not None and entry.time_ns > until_ns:
                continue
            kept.append(entry)
            if len(kept) == tail:
                break
    return reversed(kept)


def _last_raw(cursor: _Cursor, tail: int | None) -> Iterator[LogEntry]:
    """A raw log's last ``tail`` entries: its lines, then its unterminated rest (taken)."""
    lines = cursor.start_backward()
    rest = cursor.rest()
    kept = [LogEntry(OUTPUT, rest.decode("utf-8", "replace"), 0)] if rest and tail != 0 else []
    with contextlib.closing(lines):
        for line in lines:
            if len(kept) == tail:
                break
            kept.append(LogEntry(OUTPUT, line.decode("utf-8", "replace") + "\n", 0))
    return reversed(kept)


def _raw_entries(lines: Iterator[bytes], cursor: _Cursor, until: int | None) -> Iterator[LogEntry]:
    if until is not None and until < 0:  # every time is 0
        return
    for line in lines:
        yield LogEntry(OUTPUT, line.decode("utf-8", "replace") + "\n", 0)
    if rest := cursor.rest():
        yield LogEntry(OUTPUT, rest.decode("utf-8", "replace"), 0)
