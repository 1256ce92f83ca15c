"""Task logs: format, rotation, reading, following, and the driver process itself.

The driver is exercised the way containerd's shim runs it: pipes on fds 3 and 4, a
ready pipe on fd 5, key/value arguments, and an environment with only
CONTAINER_ID and CONTAINER_NAMESPACE.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from _logfollow import follow_in_thread
from _procs import gone

from ctrexec import defaults
from ctrexec.errors import FailedPrecondition, InvalidArgument
from ctrexec.logs import driver as logdriver
from ctrexec.logs.launcher import boot_source, launcher_source, write_launcher
from ctrexec.logs.orphaned_shims import stop_orphaned_drivers, stop_orphaned_drivers_of
from ctrexec.logs.reader import (
    MAX_LINE,
    LineSplitter,
    LogEntry,
    LogWriter,
    decode_entry,
    dropped_bytes,
    encode_entry,
    format_time,
    log_uri,
    parse_time,
    read_logs,
    read_task_logs,
    rotated_paths,
)

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000_123_456_789


def entries(path: Path, **kw: object) -> list[LogEntry]:
    return list(read_logs(path, **kw))  # type: ignore[arg-type]


def all_files(path: Path) -> list[Path]:
    return [Path(p) for p in rotated_paths(path)] + ([path] if path.exists() else [])


# ----------------------------------------------------------------------------- format


def test_encode_is_docker_json_file_format() -> None:
    line = encode_entry("stdout", 'hi "there"\t\u00e9\u0001\n', T0)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert line == (
        json.dumps(
            {"log": 'hi "there"\t\u00e9\u0001\n', "stream": "stdout", "time": format_time(T0)},
            ensure_ascii=False,
            separators=(",", ":"),
        ).encode()
        + b"\n"
    )
    assert line.startswith(b'{"log":')
    obj = json.loads(line)
    assert list(obj) == ["log", "stream", "time"]
    assert obj["time"] == "2023-11-14T22:13:20.123456789Z"


def test_round_trip_keeps_text_stream_and_nanoseconds() -> None:
    for message in ["plain\n", "no newline", "", "\u2603 snow\n", "\x00\x1b[31mred\n"]:
        for stream in ("stdout", "stderr"):
            entry = decode_entry(encode_entry(stream, message, T0))
            assert entry == LogEntry(stream, message, T0)
    entry = decode_entry(encode_entry("stdout", b"bad \xff utf8\n", T0))
    assert entry is not None and entry.message == "bad \ufffd utf8\n"
    assert entry.time == "2023-11-14T22:13:20.123456789Z"
    assert not entry.partial
    assert LogEntry("stdout", "x", 0).partial


def test_decode_skips_garbage() -> None:
    for bad in [b"", b"{", b"[]", b'{"log":1,"stream":"stdout","time":"x"}', b'{"log":"x"}']:
        assert decode_entry(bad) is None
    assert decode_entry(b'{"log":"x","stream":"stdout","time":"yesterday"}') is None


def test_parse_time_accepts_docker_and_offsets() -> None:
    assert parse_time("2023-11-14T22:13:20.123456789Z") == T0
    assert parse_time("2023-11-14T22:13:20.1234567Z") == T0 - 89
    assert parse_time("2023-11-14T22:13:20Z") == 1_700_000_000 * 10**9
    assert parse_time("2023-11-15T00:13:20.5+02:00") == 1_700_000_000_500_000_000
    assert parse_time("1970-01-01T00:00:00Z") == 0
    assert parse_time("2000-02-29T12:00:00Z") == 951_825_600 * 10**9
    for bad in ["", "2023-11-14", "2023-11-14T22:13:20", "2023-11-14T22:13:20.Z", "x" * 30]:
        with pytest.raises(InvalidArgument):
            parse_time(bad)


def test_format_time_fixed_width_and_sortable() -> None:
    times = [0, 1, 999_999_999, 10**9, T0]
    texts = [format_time(t) for t in times]
    assert {len(t) for t in texts} == {30}
    assert texts == sorted(texts)
    assert [parse_time(t) for t in texts] == times


# ----------------------------------------------------------------------------- splitting


def test_splitter_keeps_newlines_and_joins_chunks() -> None:
    s = LineSplitter()
    assert s.feed(b"a\nb") == [b"a\n"]
    assert s.feed(b"c\n\nd") == [b"bc\n", b"\n"]
    assert s.flush() == [b"d"]
    assert s.flush() == []


def test_splitter_splits_long_lines_like_docker() -> None:
    s = LineSplitter(max_line=8)
    assert s.feed(b"12345678") == []  # may still end with its newline
    assert s.feed(b"\n") == [b"12345678\n"]
    assert s.feed(b"abcdefghijklmnopq\n") == [b"abcdefgh", b"ijklmnop", b"q\n"]
    default = LineSplitter()
    pieces = default.feed(b"x" * (MAX_LINE * 2 + 5) + b"\n")
    assert [len(p) for p in pieces] == [MAX_LINE, MAX_LINE, 6]


def test_splitter_never_tears_utf8() -> None:
    text = "\u20ac" * 20 + "\U0001f600" * 10 + "\n"  # 3- and 4-byte characters
    for max_line in range(4, 20):
        s = LineSplitter(max_line=max_line)
        pieces = s.feed(text.encode())
        assert b"".join(pieces) == text.encode()
        for piece in pieces:
            piece.decode("utf-8")  # each piece is valid on its own
            assert len(piece.rstrip(b"\n")) <= max_line


# ----------------------------------------------------------------------------- writer


def write_numbered(w: LogWriter, n: int, stream: str = "stdout", start: int = 0) -> None:
    for i in range(start, start + n):
        assert w.write(stream, f"line {i:05d}\n", T0 + i)


def test_rotation_bounds_disk_use(tmp_path: Path) -> None:
    path = tmp_path / "task.log"
    max_size, max_files = 1000, 3
    with LogWriter(path, max_size=max_size, max_files=max_files) as w:
        write_numbered(w, 500)
        line_len = len(encode_entry("stdout", "line 00000\n", T0))
    files = all_files(path)
    assert [f.name for f in files] == ["task.log.2", "task.log.1", "task.log"]
    assert all(f.stat().st_size <= max_size for f in files)
    assert sum(f.stat().st_size for f in files) <= max_size * max_files + line_len
    assert w.dropped == 0 and w.written == 500


def test_one_file_means_truncate_in_place(tmp_path: Path) -> None:
    path = tmp_path / "one.log"
    with LogWriter(path, max_size=300, max_files=1) as w:
        write_numbered(w, 50)
    assert rotated_paths(path) == []
    assert path.stat().st_size <= 300
    assert entries(path)[-1].message == "line 00049\n"


def test_oversized_entry_goes_alone_into_a_file(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    with LogWriter(path, max_size=100, max_files=2) as w:
        w.write("stdout", "small\n", T0)
        w.write("stdout", "x" * 500 + "\n", T0)
        w.write("stdout", "after\n", T0)
    assert [e.message for e in entries(path)] == ["x" * 500 + "\n", "after\n"]


def test_writer_appends_to_an_existing_log(tmp_path: Path) -> None:
    path = tmp_path / "again.log"
    with LogWriter(path, max_size=10_000) as w:
        write_numbered(w, 3)
    with LogWriter(path, max_size=10_000) as w:
        write_numbered(w, 3, start=3)
    assert [e.message for e in entries(path)] == [f"line {i:05d}\n" for i in range(6)]


def test_write_failure_drops_and_recovers(tmp_path: Path) -> None:
    path = tmp_path / "blocked" / "task.log"
    path.parent.mkdir()
    path.mkdir()  # a directory where the file should be: every open fails
    w = LogWriter(path, retry_interval=0.0)
    assert not w.open()
    assert isinstance(w.last_error, OSError)
    assert not w.write("stdout", "lost\n")
    assert w.dropped == 1 and w.dropped_bytes > 0
    lost = w.dropped_bytes
    path.rmdir()
    assert w.write("stdout", "kept\n")
    w.close()
    assert not w.write("stdout", "after close\n")
    marker, kept = entries(path)
    assert (marker.stream, marker.dropped) == ("stderr", lost)
    assert f"{lost} bytes of output dropped" in marker.message
    assert kept.message == "kept\n"
    assert w.dropped == 2


def test_a_full_disk_is_marked_where_output_was_lost(tmp_path: Path) -> None:
    """/dev/full answers every write with ENOSPC, as a full log disk does."""
    path = tmp_path / "task.log"
    path.symlink_to("/dev/full")
    heard: list[str] = []
    w = LogWriter(path, retry_interval=0.0, notify=heard.append)
    assert w.write("stdout", "before\n") is False
    assert w.write("stderr", "during\n") is False
    lost = w.dropped_bytes
    assert w.unmarked == lost and len(heard) == 1 and "No space left" in heard[0]
    path.unlink()  # space is back
    assert w.write("stdout", "after\n")
    w.close()
    got = entries(path)
    assert [e.message for e in got][1:] == ["after\n"]
    assert got[0].dropped == lost and "No space left on device" in got[0].message
    assert w.unmarked == 0 and len(heard) == 2 and "writing again" in heard[1]
    assert dropped_bytes("json-file", path, daemon_dir=tmp_path / "no-daemon") == lost


def test_dropped_bytes_count_the_tasks_output_not_its_json_entries(tmp_path: Path) -> None:
    """Issue 36 (7d): 43,995,442 bytes said lost for 3,933,582: each entry's JSON and
    timestamp (~60 bytes) was counted. The unit is a byte the task wrote."""
    path = tmp_path / "task.log"
    path.symlink_to("/dev/full")
    w = LogWriter(path, retry_interval=0.0)
    lines = [f"line {i}\n" for i in range(1000)] + ["é€\n"]
    for line in lines:
        assert w.write("stdout", line) is False
    assert w.write("stderr", b"raw \xff\n") is False
    lost = sum(len(line.encode()) for line in lines) + len(b"raw \xff\n")
    assert (w.dropped, w.dropped_bytes, w.unmarked) == (len(lines) + 1, lost, lost)
    path.unlink()
    assert w.write("stdout", "after\n")
    w.close()
    marker = entries(path)[0]
    assert marker.dropped == lost and f"{lost} bytes of output dropped" in marker.message
    assert dropped_bytes("json-file", path, daemon_dir=tmp_path / "no-daemon") == lost


def test_writer_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument):
        LogWriter("relative.log")
    with pytest.raises(InvalidArgument):
        LogWriter(tmp_path / "x", max_size=0)
    with pytest.raises(InvalidArgument):
        LogWriter(tmp_path / "x", max_files=0)


def test_two_streams_write_concurrently(tmp_path: Path) -> None:
    path = tmp_path / "both.log"
    n = 3000
    with LogWriter(path, max_size=64 * 1024, max_files=1000) as w:
        barrier = threading.Barrier(2)

        def pump(stream: str) -> None:
            barrier.wait()
            for i in range(n):
                w.write(stream, f"{stream} {i} " + "y" * (i % 50) + "\n")

        threads = [threading.Thread(target=pump, args=(s,)) for s in ("stdout", "stderr")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    raw = b"".join(f.read_bytes() for f in all_files(path))
    lines = raw.splitlines()
    assert len(lines) == 2 * n
    assert all(decode_entry(line) is not None for line in lines)  # no torn lines
    got = entries(path)
    for stream in ("stdout", "stderr"):
        seq = [int(e.message.split()[1]) for e in got if e.stream == stream]
        assert seq == list(range(n))
    assert len(rotated_paths(path)) > 1


# ----------------------------------------------------------------------------- reader


def test_read_across_rotation_in_order(tmp_path: Path) -> None:
    path = tmp_path / "task.log"
    with LogWriter(path, max_size=2000, max_files=4) as w:
        write_numbered(w, 400)
    got = [int(e.message.split()[1]) for e in entries(path)]
    assert got == list(range(got[0], 400))  # contiguous, oldest first, ends at the last
    assert 400 - got[0] > 60  # several files' worth


def test_missing_log_reads_as_empty(tmp_path: Path) -> None:
    assert entries(tmp_path / "nothing.log") == []


def test_tail_since_and_streams(tmp_path: Path) -> None:
    path = tmp_path / "task.log"
    with LogWriter(path, max_size=1500, max_files=5) as w:
        for i in range(60):
            w.write("stdout" if i % 2 == 0 else "stderr", f"{i}\n", T0 + i * 1000)
    assert [e.message for e in entries(path, tail=3)] == ["57\n", "58\n", "59\n"]
    assert entries(path, tail=0) == []
    assert [e.message for e in entries(path, tail=2, streams=["stderr"])] == ["57\n", "59\n"]
    assert [e.message for e in entries(path, since=T0 + 57_000)] == ["57\n", "58\n", "59\n"]
    since = datetime.fromtimestamp(T0 // 10**9, UTC) + timedelta(microseconds=123_457 + 57)
    assert [e.message for e in entries(path, since=since)] == ["58\n", "59\n"]
    with pytest.raises(InvalidArgument):
        entries(path, since=datetime(2023, 1, 1))  # naive on purpose
    with pytest.raises(InvalidArgument):
        entries(path, tail=-1)
    offset = datetime.fromtimestamp(0, timezone(timedelta(hours=5)))
    assert len(entries(path, since=offset)) == 60


def test_reader_skips_torn_and_foreign_lines(tmp_path: Path) -> None:
    path = tmp_path / "task.log"
    path.write_bytes(
        encode_entry("stdout", "one\n", T0) + b"not json\n" + encode_entry("stderr", "two\n", T0)
    )
    assert [e.message for e in entries(path)] == ["one\n", "two\n"]


def wait_for(cond: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.01)
    raise AssertionError("condition not met in time")


def test_follow_sees_appended_lines_and_rotation(tmp_path: Path) -> None:
    path = tmp_path / "task.log"
    w = LogWriter(path, max_size=1500, max_files=3)
    write_numbered(w, 5)
    got, stop, t = follow_in_thread(path, tail=2)
    try:
        wait_for(lambda: len(got) == 2)
        for i in range(5, 200):
            w.write("stdout", f"line {i:05d}\n", T0 + i)
            if i % 3 == 0:
                time.sleep(0.004)  # let the follower poll now and then
        wait_for(lambda: got and got[-1].message == "line 00199\n")
    finally:
        stop.set()
        t.join(5)
        w.close()
    assert not t.is_alive()
    assert [int(e.message.split()[1]) for e in got] == list(range(3, 200))
    assert len(rotated_paths(path)) == 2


def test_follow_waits_for_the_file_and_sees_truncation(tmp_path: Path) -> None:
    path = tmp_path / "later.log"
    got, stop, t = follow_in_thread(path)
    try:
        time.sleep(0.05)
        w = LogWriter(path, max_size=250, max_files=1)
        for i in range(12):
            w.write("stderr", f"line {i:05d}\n", T0 + i)
            time.sleep(0.03)
        wait_for(lambda: got and got[-1].message == "line 00011\n")
    finally:
        stop.set()
        t.join(5)
    assert [int(e.message.split()[1]) for e in got] == list(range(12))
    assert {e.stream for e in got} == {"stderr"}


def test_follow_stops_when_told(tmp_path: Path) -> None:
    path = tmp_path / "idle.log"
    got, stop, t = follow_in_thread(path)
    stop.set()
    t.join(2)
    assert not t.is_alive() and got == []


def test_follow_reads_once_more_after_stop(tmp_path: Path) -> None:
    """What was written before stop() said so is yielded (the task's last words)."""
    path = tmp_path / "last.log"
    w = LogWriter(path)
    w.write("stdout", "first\n", T0)

    def stop() -> bool:
        w.write("stdout", "last words", T0 + 1)  # e.g. a partial line flushed at exit
        return True

    got = list(read_logs(path, follow=True, stop=stop, poll_interval=0.01))
    w.close()
    assert [e.message for e in got] == ["first\n", "last words"]


# ----------------------------------------------------------------------------- URI


def go_binary_args(uri: str) -> list[str]:
    """What containerd's NewBinaryCmd passes: key, value per query key, random order."""
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(uri).query, keep_blank_values=True)
    keys = list(query)
    random.shuffle(keys)
    return [a for k in keys for a in (k, query[k][0])]


def test_log_uri_format_and_driver_args(tmp_path: Path) -> None:
    driver = tmp_path / "my driver"
    uri = log_uri("/var/log/ctrexec/a b&c=d.log", 4096, 7, driver=driver)
    parts = urllib.parse.urlsplit(uri)
    assert parts.scheme == "binary" and parts.netloc == ""
    assert urllib.parse.unquote(parts.path) == str(driver)
    for _ in range(10):
        args = go_binary_args(uri)
        assert logdriver.parse_args(args) == ("/var/log/ctrexec/a b&c=d.log", 4096, 7)


def test_log_uri_rejects_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument):
        log_uri("relative.log", driver=tmp_path / "d")
    with pytest.raises(InvalidArgument):
        log_uri(tmp_path / "a.log", driver="relative/driver")
    with pytest.raises(InvalidArgument):
        log_uri(tmp_path / "a.log", 0, driver=tmp_path / "d")


def test_parse_args_forms_and_errors() -> None:
    assert logdriver.parse_args(["--path=/x.log", "--max-files", "2"]) == ("/x.log", 10 << 20, 2)
    assert logdriver.parse_args(["future", "1", "path", "/x"]) == ("/x", 10 << 20, 3)
    for bad in (["path"], [], ["path", "rel.log"], ["path", "/x", "max-size", "ten"]):
        with pytest.raises(InvalidArgument):
            logdriver.parse_args(bad)


def test_write_launcher_is_idempotent_and_executable(tmp_path: Path) -> None:
    first = write_launcher(tmp_path / "bin")
    assert write_launcher(tmp_path / "bin") == first
    assert os.access(first, os.X_OK)
    assert Path(first).read_text().startswith(f"#!{sys.executable} -IS\n")
    assert write_launcher(tmp_path / "bin", python="/other/python") != first


def _imported_by_launcher(tmp_path: Path) -> list[str]:
    """The modules the real launcher file imports, as ``-X importtime`` lists them.

    Run without arguments the driver refuses its configuration (status 2) and, with no
    pipes on fds 3-5, exits at once: by then it has imported all it ever imports.
    """
    launcher = write_launcher(tmp_path / "bin")
    done = subprocess.run(
        [sys.executable, "-IS", "-X", "importtime", launcher],
        capture_output=True,
        text=True,
        env={},
        check=False,
    )
    assert done.returncode == logdriver.EXIT_BAD_CONFIG, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    return [line.rsplit("|", 1)[1].strip() for line in lines[1:]]  # the first is a header


def test_driver_imports_stay_cheap(tmp_path: Path) -> None:
    """The launcher path must not pull in grpc, attrs, json, re or typing (per-task cost)."""
    out = _imported_by_launcher(tmp_path)
    assert "ctrexec.logs.driver" in out and "ctrexec.defaults" in out
    for heavy in (
        "grpc",
        "attrs",
        "attr",
        "json",
        "re",
        "typing",
        "pathlib",
        "ctrexec",  # the stand-in package: ctrexec/__init__.py never runs
        "ctrexec.logs.reader",
    ):
        assert heavy not in out
    # Each of these costs every driver ~0.2-0.8 MiB PSS (enum through signal).
    assert [m for m in ("signal", "enum", "threading", "contextlib", "functools") if m in out] == []


def test_the_launcher_and_the_daemon_boot_from_one_script(tmp_path: Path) -> None:
    """One stand-in package script: the launcher file is the driver's, behind its ``#!``."""
    text = Path(write_launcher(tmp_path / "bin")).read_text()
    assert text == launcher_source(sys.executable)
    assert text.endswith(boot_source("ctrexec.logs.driver"))
    assert f"pkg.__path__ = [{str(ROOT / 'ctrexec')!r}]" in text


def test_rotation_defaults_have_one_definition() -> None:
    """The writer, the URI, the config and the CLI all take ctrexec.defaults' values."""
    from ctrexec.tasks.config import TaskConfig

    assert (logdriver.DEFAULT_MAX_SIZE, logdriver.DEFAULT_MAX_FILES) == (
        defaults.DEFAULT_LOG_MAX_SIZE,
        defaults.DEFAULT_LOG_MAX_FILES,
    )
    config = TaskConfig(name="t", image="img")
    assert (config.log_max_size, config.log_max_files) == (
        defaults.DEFAULT_LOG_MAX_SIZE,
        defaults.DEFAULT_LOG_MAX_FILES,
    )
    assert logdriver.parse_args(["path", "/x"])[1:] == (
        defaults.DEFAULT_LOG_MAX_SIZE,
        defaults.DEFAULT_LOG_MAX_FILES,
    )


def test_read_logs_takes_the_driver_and_checks_it_at_the_call(tmp_path: Path) -> None:
    path = tmp_path / "task.log"
    path.write_bytes(b"raw line\n")
    with pytest.raises(FailedPrecondition, match="does not support reading"):
        read_logs(path, driver="none")  # not only once iterated
    with pytest.raises(InvalidArgument, match="unknown log driver 'syslog'"):
        read_logs(path, driver="syslog")
    with pytest.raises(InvalidArgument, match="keeps no timestamps"):
        read_logs(path, driver="file", since=0)
    assert [(e.stream, e.message) for e in read_logs(path, driver="file")] == [
        ("output", "raw line\n")
    ]


def test_read_task_logs_is_a_deprecated_read_logs(tmp_path: Path) -> None:
    """Issue 38: one name per operation. ``read_task_logs`` (driver first) still reads
    what ``read_logs`` does, for one release, and says it is deprecated."""
    path = tmp_path / "task.log"
    path.write_bytes(b"raw line\n")
    with pytest.warns(DeprecationWarning, match="read_task_logs is deprecated: use read_logs"):
        old = list(read_task_logs("file", path, tail=1))
    assert old == list(read_logs(path, driver="file", tail=1))
    assert [e.message for e in old] == ["raw line\n"]
    with pytest.warns(DeprecationWarning), pytest.raises(FailedPrecondition):
        read_task_logs("none", path)  # its checks still come at the call


# ----------------------------------------------------------------------------- driver process

_EXEC_WITH_FDS = """
import fcntl, os, sys
src = [int(a) for a in sys.argv[1:4]]
high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 20) for fd in src]
for fd in src:
    os.close(fd)
for target, fd in zip((3, 4, 5), high):
    os.dup2(fd, target)
    os.close(fd)
os.execve(sys.argv[4], sys.argv[4:], {"CONTAINER_ID": "t1", "CONTAINER_NAMESPACE": "default"})
"""


_started: list[Driver] = []


@pytest.fixture(autouse=True)
def _kill_left_drivers() -> Iterator[None]:
    """A failed test must not leave its driver processes running."""
    yield
    while _started:
        d = _started.pop()
        if d.proc.poll() is None:
            d.proc.kill()
        d.proc.communicate(timeout=10)


class Driver:
    """A driver process wired like the shim wires it."""

    def __init__(self, argv: Sequence[str], env: dict[str, str] | None = None) -> None:
        out_r, self.out_w = os.pipe()
        err_r, self.err_w = os.pipe()
        self.ready_r, ready_w = os.pipe()
        fds = (out_r, err_r, ready_w)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _EXEC_WITH_FDS, *map(str, fds), *argv],
            pass_fds=fds,
            stderr=subprocess.PIPE,
            env=env,
        )
        for fd in fds:
            os.close(fd)
        _started.append(self)

    def wait_ready(self, timeout: float = 30.0) -> None:
        os.set_blocking(self.ready_r, True)
        done = threading.Event()

        def read_ready() -> None:
            assert os.read(self.ready_r, 1) == b""  # EOF: closed, nothing written
            done.set()

        threading.Thread(target=read_ready, daemon=True).start()
        assert done.wait(timeout), "driver never closed fd 5"

    def close_pipes(self) -> None:
        for name in ("out_w", "err_w"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)

    def finish(self, timeout: float = 30.0) -> tuple[int, str]:
        self.close_pipes()
        _, err = self.proc.communicate(timeout=timeout)
        os.close(self.ready_r)
        return self.proc.returncode, err.decode()


@pytest.fixture
def launcher(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_launcher(tmp_path_factory.mktemp("launcher"))


def module_argv() -> list[str]:
    return [sys.executable, "-m", "ctrexec.logs.driver"]


@pytest.fixture
def driver_env() -> Iterator[dict[str, str]]:
    yield {"PYTHONPATH": str(ROOT)}


def test_driver_main_via_module(tmp_path: Path, driver_env: dict[str, str]) -> None:
    path = tmp_path / "logs" / "task.log"
    d = Driver(
        [*module_argv(), "max-files", "2", "path", str(path), "max-size", "100000"], driver_env
    )
    d.wait_ready()
    assert path.exists()  # opened before it said ready
    os.write(d.out_w, b"out 1\nout ")
    os.write(d.err_w, b"err 1\n")
    os.write(d.out_w, b"2\n" + b"z" * (MAX_LINE + 10) + b"\nlast without newline")
    os.write(d.err_w, "\u00e9\n".encode())
    code, err = d.finish()
    assert code == 0, err
    got = entries(path)
    out = [e.message for e in got if e.stream == "stdout"]
    assert out == ["out 1\n", "out 2\n", "z" * MAX_LINE, "z" * 10 + "\n", "last without newline"]
    assert [e.message for e in got if e.stream == "stderr"] == ["err 1\n", "\u00e9\n"]


def test_driver_via_launcher_with_shim_environment(tmp_path: Path, launcher: str) -> None:
    path = tmp_path / "task.log"
    d = Driver([launcher, *go_binary_args(log_uri(path, 4000, 5, driver=launcher))])
    d.wait_ready()
    for i in range(200):  # ~15 KB: rotates, but all of it fits in 5 x 4000 bytes
        os.write(d.out_w if i % 2 else d.err_w, f"line {i:05d}\n".encode())
    code, err = d.finish()
    assert code == 0, err
    got = entries(path)
    # The two pipes are drained by two threads: order holds within a stream only.
    for stream, first in (("stderr", 0), ("stdout", 1)):
        seq = [int(e.message.split()[1]) for e in got if e.stream == stream]
        assert seq == list(range(first, 200, 2))
    files = all_files(path)
    assert len(files) > 2
    assert all(f.stat().st_size <= 4000 for f in files)


#: The shim SIGKILLs a log driver still running this long after its SIGTERM: a driver
#: that exits on SIGTERM does so before then, or the task's Delete waits for the kill.
SHIM_KILL_AFTER = 12.0


def test_driver_exits_on_sigterm_with_its_pipes_open(tmp_path: Path, launcher: str) -> None:
    """In terminal mode the shim never closes the stderr pipe: SIGTERM alone ends it."""
    path = tmp_path / "task.log"
    d = Driver([launcher, "path", str(path)])
    d.wait_ready()
    os.write(d.out_w, b"before term\nhalf a line")
    wait_for(lambda: [e.message for e in entries(path)][:1] == ["before term\n"], 30)
    d.proc.send_signal(signal.SIGTERM)  # pipes still open, as in terminal mode
    d.proc.wait(timeout=SHIM_KILL_AFTER)
    code, _ = d.finish()
    assert code == 0
    assert [e.message for e in entries(path)] == ["before term\n", "half a line"]


def test_driver_exits_cleanly_on_every_sigterm_while_its_streams_are_busy(
    tmp_path: Path, launcher: str
) -> None:
    """The delete of a task that logs all the time (issue 7, item 13), as the shim does
    it: close the pipes, then SIGTERM at once, while the driver is busy writing.

    The driver's SIGTERM handler once set a threading.Event; landing while the main
    thread held that Event's lock, it deadlocked, and the shim killed it at 12 s. Here
    the driver is this test's child, so its exit status is read from the kernel: 0 is
    a clean end, -SIGKILL (from the bound below) a driver that never ended.
    """
    for i in range(40):
        path = tmp_path / f"task-{i}.log"
        d = Driver([launcher, "path", str(path)])
        d.wait_ready()
        stop = threading.Event()

        def spam(fd: int = d.out_w, stop: threading.Event = stop) -> None:
            with contextlib.suppress(OSError):
                while not stop.is_set():
                    os.write(fd, b"tick\n" * 64)

        writer = threading.Thread(target=spam, daemon=True)
        writer.start()
        wait_for(lambda: path.exists() and path.stat().st_size > 0, 30)  # noqa: B023
        stop.set()
        writer.join(timeout=30)
        d.close_pipes()
        d.proc.send_signal(signal.SIGTERM)
        try:
            d.proc.wait(timeout=SHIM_KILL_AFTER)
        except subprocess.TimeoutExpired:
            d.proc.kill()  # as the shim would
        code, err = d.finish()
        assert code == 0, f"cycle {i}: the driver ended with {code}: {err}"
        assert entries(path)[-1].message == "tick\n"


def stdout_text(path: Path) -> str:
    """The task's stdout as ``docker logs`` prints it: the messages one after another."""
    return "".join(e.message for e in entries(path) if e.stream == "stdout")


def stderr_text(path: Path) -> str:
    return "".join(e.message for e in entries(path) if e.stream == "stderr")


def test_driver_writes_a_partial_line_while_the_pipes_stay_open(
    tmp_path: Path, launcher: str
) -> None:
    """The shim holds the write ends until delete: a quiet partial line is written anyway."""
    path = tmp_path / "task.log"
    d = Driver([launcher, "path", str(path)])
    d.wait_ready()
    assert d.out_w is not None
    os.write(d.out_w, b"whole\npart")
    wait_for(lambda: [e.message for e in entries(path)] == ["whole\n", "part"])
    assert all(not e.partial for e in entries(path)[:1]) and entries(path)[1].partial
    os.write(d.out_w, b"ial, then the rest\n")
    wait_for(lambda: len(entries(path)) == 3)
    code, err = d.finish()
    assert code == 0, err
    assert [e.message for e in entries(path)] == ["whole\n", "part", "ial, then the rest\n"]
    assert stdout_text(path) == "whole\npartial, then the rest\n"


def test_driver_one_mib_line_and_binary_bytes(tmp_path: Path, launcher: str) -> None:
    path = tmp_path / "task.log"
    d = Driver([launcher, "path", str(path)])
    d.wait_ready()
    assert d.out_w is not None and d.err_w is not None
    big = "".join(chr(0x61 + i % 26) for i in range(1 << 20))
    blob = random.Random(7).randbytes(4096) + b"\xff\xfe tail"  # no newline at the end
    writer = threading.Thread(target=os.write, args=(d.out_w, big.encode() + b"\n" + big.encode()))
    writer.start()  # 2 MiB: blocks until the driver has drained it
    os.write(d.err_w, blob)
    writer.join(30)
    assert not writer.is_alive(), "the driver stopped draining"
    # Both ends are partial and the pipes stay open: the quiet-pipe flush writes them.
    wait_for(lambda: len(stdout_text(path)) == 2 * len(big) + 1, timeout=30)
    wait_for(lambda: stderr_text(path).endswith(" tail"))
    code, err = d.finish()
    assert code == 0, err
    assert stdout_text(path) == big + "\n" + big
    out = [e for e in entries(path) if e.stream == "stdout"]
    assert all(len(e.message.rstrip("\n").encode()) <= MAX_LINE for e in out)
    assert sum(not e.partial for e in out) == 1  # one newline, one complete entry
    # Under 16 KiB per line, and written at once: the pieces decode as the whole does.
    assert stderr_text(path) == blob.decode("utf-8", "replace")


_PRINT_AND_DIE = "import os, sys; os.write(1, b'half a li'); os.kill(os.getpid(), 9)"


def test_driver_keeps_a_line_cut_by_a_killed_task(tmp_path: Path, launcher: str) -> None:
    """A task SIGKILLed mid-line: the shim's write end stays open, the text is kept."""
    path = tmp_path / "task.log"
    d = Driver([launcher, "path", str(path)])
    d.wait_ready()
    task = subprocess.run([sys.executable, "-c", _PRINT_AND_DIE], stdout=d.out_w, check=False)
    assert task.returncode == -signal.SIGKILL
    wait_for(lambda: stdout_text(path) == "half a li")
    code, err = d.finish()
    assert code == 0, err
    assert [e.message for e in entries(path)] == ["half a li"]


def test_driver_exits_on_sigterm_as_the_pipes_close(tmp_path: Path, launcher: str) -> None:
    """The shim's delete: close the pipes, SIGTERM at once. SIGTERM used to be handled
    with Event.set(), which deadlocks when it lands while the main thread holds that
    Event's lock (woken by a pump that just saw the end of its stream). A SIGTERM
    that comes as the driver exits must not turn its clean exit into a kill."""
    slowest = 0.0
    for i in range(60):
        path = tmp_path / f"t{i}.log"
        d = Driver([launcher, "path", str(path)])
        d.wait_ready()
        assert d.out_w is not None
        os.write(d.out_w, b"line\nhalf")
        start = time.monotonic()
        d.close_pipes()
        time.sleep(random.random() * 0.03 if i % 2 else 0)  # also as the driver exits
        d.proc.send_signal(signal.SIGTERM)
        d.proc.wait(timeout=10)  # a hang guard only; the shim kills at 12 s
        slowest = max(slowest, time.monotonic() - start)
        code, err = d.finish()
        assert code == 0, err
        assert [e.message for e in entries(path)] == ["line\n", "half"]
    print(f"slowest exit after close + SIGTERM: {slowest:.3f}s")


def test_driver_keeps_draining_when_it_cannot_write(tmp_path: Path, launcher: str) -> None:
    path = tmp_path / "dir-not-file"
    path.mkdir()
    d = Driver([launcher, "path", str(path)])
    d.wait_ready()
    blob = b"x" * 1023 + b"\n"
    done = threading.Event()

    def flood() -> None:
        assert d.out_w is not None
        for _ in range(2048):  # 2 MiB, far more than a pipe holds
            os.write(d.out_w, blob)
        done.set()

    threading.Thread(target=flood, daemon=True).start()
    assert done.wait(30), "driver stopped draining: the task would block"
    code, err = d.finish()
    assert code == 0
    assert "dropped 2048 entries" in err


def test_driver_with_bad_arguments_still_drains(tmp_path: Path, launcher: str) -> None:
    d = Driver([launcher, "max-size", "10"])
    d.wait_ready()
    os.write(d.out_w, b"y" * 200_000)  # blocks forever unless someone reads
    code, err = d.finish()
    assert code == logdriver.EXIT_BAD_CONFIG
    assert "absolute log path is required" in err


# ----------------------------------------------------------------------------- orphans

#: The fake shims' namespaces, this process's own: stop_orphaned_drivers looks at every
#: process of the host, so another test run's fake shims (same id) must not be ours.
NS1, NS2 = f"ns1-{os.getpid()}", f"ns2-{os.getpid()}"

_FAKE_SHIM = """
import os, subprocess, sys, time
driver, log, mode = sys.argv[1:4]
r, w = os.pipe()  # the shim keeps the write end, as containerd 1.6 leaks it
kids = []
if mode != "childless":
    code = "import sys; sys.stdin.buffer.read()"
    kids.append(subprocess.Popen([driver, "-c", code, "path", log], stdin=r))
if mode == "busy":
    kids.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]))
if mode == "runc":  # named like runc, working for container t1 until told to end
    runc = os.path.join(os.path.dirname(driver), "runc")
    code = "import sys; sys.stdin.buffer.read()"
    kids.append(subprocess.Popen([runc, "-c", code, "t1"], stdin=subprocess.PIPE))
os.close(r)
print(" ".join(str(k.pid) for k in kids), flush=True)
if mode == "runc":
    sys.stdin.readline()  # the test's word: runc's work is done
    kids[-1].stdin.close()
    kids[-1].wait()  # reaped, as the real shim reaps runc
time.sleep(600)
"""


@pytest.fixture
def fake_shim(
    tmp_path: Path,
) -> Iterator[Callable[[str, str], tuple[subprocess.Popen[str], list[int]]]]:
    """A process named like a runc shim with a child named like our log driver."""
    shim_exe = tmp_path / "containerd-shim-runc-v2"
    driver_exe = tmp_path / logdriver.DRIVER_NAME
    for exe in (shim_exe, driver_exe, tmp_path / "runc"):
        exe.symlink_to(sys.executable)
    started: list[tuple[subprocess.Popen[str], list[int]]] = []

    def start(
        mode: str, namespace: str, task: str = "t1"
    ) -> tuple[subprocess.Popen[str], list[int]]:
        args = [str(driver_exe), str(tmp_path / task / "task.log"), mode]
        flags = ["-namespace", namespace, "-id", task]
        shim = subprocess.Popen(
            [str(shim_exe), "-c", _FAKE_SHIM, *args, *flags],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert shim.stdout is not None
        kids = [int(p) for p in shim.stdout.readline().split()]
        started.append((shim, kids))
        return shim, kids

    yield start
    for shim, kids in started:
        for pid in kids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shim.kill()
        shim.communicate(timeout=10)  # also closes its pipes


def test_orphaned_shim_and_driver_are_stopped(tmp_path: Path, fake_shim: Any) -> None:
    """containerd 1.6 leaves a shim holding the driver's pipes after a cancelled Create."""
    shim, (driver,) = fake_shim("orphan", NS1)
    log = tmp_path / "t1" / "task.log"
    assert stop_orphaned_drivers(log, NS1, "t1", settle=5, stable=0.2) == [shim.pid]
    assert shim.wait(10) == -signal.SIGKILL
    wait_for(lambda: gone(driver))  # its pipe ended with the shim


def test_the_orphans_of_many_tasks_are_stopped_in_one_look(tmp_path: Path, fake_shim: Any) -> None:
    """A removal of many looks for all its tasks' shims at once (one scan of the host's
    processes each time round): each orphan goes, a busy shim of one of them stays."""
    first, (first_driver,) = fake_shim("orphan", NS1, "t1")
    second, (second_driver,) = fake_shim("orphan", NS1, "t2")
    busy, _ = fake_shim("busy", NS1, "t3")
    tasks = [(tmp_path / t / "task.log", t) for t in ("t1", "t2", "t3")]
    got = stop_orphaned_drivers_of(tasks, NS1, settle=5, stable=0.2)
    assert sorted(got) == sorted([first.pid, second.pid])
    assert first.wait(10) == second.wait(10) == -signal.SIGKILL
    wait_for(lambda: gone(first_driver) and gone(second_driver))
    assert busy.poll() is None


def test_a_shim_that_runs_more_is_left_alone(tmp_path: Path, fake_shim: Any) -> None:
    busy, _ = fake_shim("busy", NS1)
    other, _ = fake_shim("orphan", NS2)  # another namespace's
    log = tmp_path / "t1" / "task.log"
    assert stop_orphaned_drivers(log, NS1, "t1", settle=5, stable=0.2) == []
    assert busy.poll() is None and other.poll() is None


def _stop_in_thread(*args: Any, **kw: Any) -> tuple[threading.Thread, list[list[int]]]:
    """stop_orphaned_drivers in a thread, so a test can look at the shim meanwhile."""
    got: list[list[int]] = []
    thread = threading.Thread(target=lambda: got.append(stop_orphaned_drivers(*args, **kw)))
    thread.start()
    return thread, got


#: How long a test gives stop_orphaned_drivers to do the wrong thing (kill a shim it
#: must still wait for) before it checks that the shim lives: many times ``stable``.
WRONG_KILL_WINDOW = 1.0


def test_a_shim_whose_runc_works_is_waited_for_then_stopped(tmp_path: Path, fake_shim: Any) -> None:
    """A cancelled create's ``runc init`` can outlive destroy's wait: while it works the
    shim is left alone; once it is done, the shim cannot stay."""
    shim, _ = fake_shim("runc", NS1)
    log = tmp_path / "t1" / "task.log"
    thread, got = _stop_in_thread(log, NS1, "t1", settle=120, stable=0.1)
    time.sleep(WRONG_KILL_WINDOW)  # the window in which a kill would be wrong
    assert shim.poll() is None and thread.is_alive()  # runc at work: it waits
    shim.stdin.write("done\n")
    shim.stdin.flush()
    thread.join(timeout=60)
    assert got == [[shim.pid]]
    assert shim.wait(10) == -signal.SIGKILL


def test_a_shim_whose_runc_lingers_is_stopped_after_settle(tmp_path: Path, fake_shim: Any) -> None:
    """containerd never shuts that shim down: past ``settle`` it goes, runc or not."""
    shim, (_, runc) = fake_shim("runc", NS1)
    got = stop_orphaned_drivers(tmp_path / "t1" / "task.log", NS1, "t1", settle=0.5, stable=0.1)
    assert got == [shim.pid]
    assert not gone(runc)  # still at work when the shim was stopped
    assert shim.wait(10) == -signal.SIGKILL


def test_a_shim_never_given_its_task_is_stopped(fake_shim: Any) -> None:
    """A shim may be childless for a moment: it goes once it has stayed so ``stable``."""
    shim, _ = fake_shim("childless", NS1)
    thread, got = _stop_in_thread("/nowhere/task.log", NS1, "t1", settle=60, stable=3)
    time.sleep(WRONG_KILL_WINDOW)
    assert shim.poll() is None and thread.is_alive()  # childless for less than stable
    thread.join(timeout=90)
    assert got == [[shim.pid]]
    assert shim.wait(10) == -signal.SIGKILL


def test_no_shim_of_ours_returns_at_once(fake_shim: Any) -> None:
    shim, _ = fake_shim("childless", NS1)
    assert stop_orphaned_drivers("/nowhere/task.log", NS1, "t2", settle=30, stable=20) == []
    assert shim.poll() is None
