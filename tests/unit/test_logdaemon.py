"""The shared log daemon as the shim meets it: FIFOs opened for writing, then closed.

A real daemon process per test, in a private state directory; no root and no
containerd. The test plays the shim: it opens the FIFOs the daemon made for writing,
writes, and closes them when the "task" ends.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctrexec import errors
from ctrexec.logs import client as logdaemon_client
from ctrexec.logs import daemon as logdaemon
from ctrexec.logs import reader as logs
from ctrexec.logs.launcher import boot_source
from ctrexec.testing import wait_for


@pytest.fixture
def logd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    state = tmp_path / "logd"
    monkeypatch.setenv("CTREXEC_LOGD_DIR", str(state))
    monkeypatch.setenv(logdaemon.IDLE_ENV, "30")
    yield state
    pid = _pid(state)
    if pid is not None and _alive(pid):
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not _alive(pid), timeout=10, what="log daemon to exit")


def _pid(state: Path) -> int | None:
    try:
        return int((state / logdaemon.PIDFILE).read_text())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is not alive: the daemon is nobody's child here but init's.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _entries(path: Path) -> list[tuple[str, str]]:
    return [(e.stream, e.message) for e in logs.read_logs(str(path))]


def _as_shim(out: str, err: str) -> tuple[int, int]:
    """Open both FIFOs for writing, as the shim does after ``runc create``.

    The shim also opens each FIFO for reading (and never reads), so its writes do not
    fail while no daemon holds the read end; that is copied here, and those read
    ends are left to the garbage of the test process (they hold no data of note).
    """
    fds = []
    for path in (out, err):
        fds.append(os.open(path, os.O_WRONLY))
        _keep.append(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
    return fds[0], fds[1]


_keep: list[int] = []


@pytest.fixture(autouse=True)
def _close_kept() -> Iterator[None]:
    yield
    while _keep:
        os.close(_keep.pop())


def test_a_run_is_logged_with_streams_apart_and_ends_with_its_writers(
    logd: Path, tmp_path: Path
) -> None:
    log = tmp_path / "logs" / "web" / "task.log"
    token, out, err = logdaemon_client.register(log, 1 << 20, 2)
    assert Path(out).is_fifo() and Path(err).is_fifo()
    assert (logd / logdaemon.STREAMS_DIR / f"{token}.json").exists()
    wo, we = _as_shim(out, err)
    os.write(wo, b"one\ntwo\n")
    os.write(we, b"oops\nno newline")
    os.close(wo)
    os.close(we)
    logdaemon_client.wait_drained(log)
    assert sorted(_entries(log)) == sorted(
        [("stdout", "one\n"), ("stdout", "two\n"), ("stderr", "oops\n"), ("stderr", "no newline")]
    )
    assert not Path(out).exists() and not Path(err).exists()
    assert list((logd / logdaemon.STREAMS_DIR).iterdir()) == []


def test_a_partial_line_is_written_while_the_stream_stays_open(logd: Path, tmp_path: Path) -> None:
    log = tmp_path / "task.log"
    _, out, err = logdaemon_client.register(log, 1 << 20, 2)
    wo, we = _as_shim(out, err)
    try:
        os.write(wo, b"prompt> ")
        wait_for(
            lambda: log.exists() and _entries(log) == [("stdout", "prompt> ")],
            timeout=10,
            what="log entries",
        )
    finally:
        os.close(wo)
        os.close(we)
    logdaemon_client.wait_drained(log)


def test_a_run_whose_task_never_opened_its_fifos_is_not_kept(logd: Path, tmp_path: Path) -> None:
    """A create that failed with no ``drop`` (its client died): the probe ends it."""
    log = tmp_path / "task.log"
    token, out, err = logdaemon_client.fifo_paths(log)
    logdaemon_client.request(
        {
            "op": "add",
            "token": token,
            "log": str(log),
            "max_size": 1 << 20,
            "max_files": 1,
            "streams": {"stdout": out, "stderr": err},
            "created": time.time() - logdaemon.PROBE_AFTER - 1,  # as if made long ago
        }
    )
    logdaemon_client.wait_drained(log, timeout=10)
    assert not Path(out).exists()
    assert logdaemon_client.ping() == {"ok": True, "pid": _pid(logd), "registrations": 0}


def test_the_daemon_starts_from_the_one_stand_in_script(logd: Path) -> None:
    """The daemon's ``-c`` script is the launcher module's, the one the driver's file has."""
    reply = logdaemon_client.request({"op": "ping"})  # starts it
    assert reply is not None
    argv = Path(f"/proc/{reply['pid']}/cmdline").read_bytes().split(b"\0")[:-1]
    assert argv[1:4] == [b"-IS", b"-c", boot_source(logdaemon.__name__).encode()]
    assert argv[4:6] == [logdaemon.NAME.encode(), os.fsencode(logd)]


def test_drop_forgets_one_run(logd: Path, tmp_path: Path) -> None:
    log = tmp_path / "task.log"
    token, out, _ = logdaemon_client.register(log, 1 << 20, 1)
    logdaemon_client.drop(token=token)
    assert not Path(out).exists()
    assert (logdaemon_client.ping() or {})["registrations"] == 0


def test_a_killed_daemon_is_replaced_and_its_runs_adopted(logd: Path, tmp_path: Path) -> None:
    log = tmp_path / "task.log"
    _, out, err = logdaemon_client.register(log, 1 << 20, 2)
    wo, we = _as_shim(out, err)
    os.write(wo, b"before\n")
    wait_for(lambda: log.exists() and len(_entries(log)) == 1, timeout=10, what="log entries")
    first = _pid(logd)
    assert first is not None
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: not _alive(first), timeout=10, what="killed daemon to go")
    os.write(wo, b"while none ran\n")  # waits in the FIFO, which the shim holds
    assert logdaemon_client.ping() is None  # ping starts nothing
    logdaemon_client.register(tmp_path / "other.log", 1 << 20, 1)  # starts a new one
    second = _pid(logd)
    assert second not in (None, first)
    os.write(wo, b"after\n")
    os.close(wo)
    os.close(we)
    logdaemon_client.wait_drained(log)
    assert [m for _, m in _entries(log)] == ["before\n", "while none ran\n", "after\n"]
    logdaemon_client.drop(log_path=tmp_path / "other.log")


def test_concurrent_first_starts_make_one_daemon(logd: Path, tmp_path: Path) -> None:
    tokens: list[str] = []
    errors: list[BaseException] = []

    def start(i: int) -> None:
        try:
            tokens.append(logdaemon_client.register(tmp_path / f"{i}.log", 1 << 20, 1)[0])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert (logdaemon_client.ping() or {})["registrations"] == 8
    for token in tokens:
        logdaemon_client.drop(token=token)


def test_an_idle_daemon_exits_and_removes_its_socket(
    logd: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(logdaemon.IDLE_ENV, "0.3")
    token, _, _ = logdaemon_client.register(tmp_path / "task.log", 1 << 20, 1)
    pid = _pid(logd)
    assert pid is not None
    logdaemon_client.drop(token=token)
    wait_for(lambda: not _alive(pid), timeout=10, what="idle daemon to exit")
    assert not (logd / logdaemon.SOCKET).exists()
    assert not (logd / logdaemon.PIDFILE).exists()


def test_a_bad_request_is_refused_in_one_line(logd: Path, tmp_path: Path) -> None:
    from ctrexec.errors import FailedPrecondition

    with pytest.raises(FailedPrecondition, match=r"log daemon: .*must be absolute"):
        logdaemon_client.request(
            {
                "op": "add",
                "token": "abc",
                "log": str(tmp_path / "t.log"),
                "max_size": 1,
                "max_files": 1,
                "streams": {"stdout": "rel", "stderr": "rel2"},
            }
        )


def test_a_full_disk_is_counted_asked_for_and_marked_when_space_is_back(
    logd: Path, tmp_path: Path
) -> None:
    """/dev/full answers writes with ENOSPC, as a full log disk does; the daemon drains on."""
    log = tmp_path / "logs" / "full" / "task.log"
    log.parent.mkdir(parents=True)
    log.symlink_to("/dev/full")
    _token, out, err = logdaemon_client.register(log, 1 << 20, 2)
    wo, we = _as_shim(out, err)
    os.write(wo, b"lost one\nlost two\n")
    wait_for(lambda: logs.dropped_bytes("json-file", log) > 0, timeout=10, what="the drop counted")
    lost = logs.dropped_bytes("json-file", log)
    log.unlink()  # space is back: the next write after the retry goes to a new file
    wait_for(
        lambda: (os.write(wo, b"kept\n") and False) or any(e.dropped for e in logs.read_logs(log)),
        timeout=10,
        what="a marker once the disk takes writes",
    )
    os.close(wo)
    os.close(we)
    logdaemon_client.wait_drained(log)
    got = list(logs.read_logs(log))
    # The writes made before the writer's next try were dropped too, and marked with them.
    assert got[0].dropped >= lost and got[0].stream == "stderr"
    assert {e.message for e in got if not e.dropped} == {"kept\n"}
    assert logs.dropped_bytes("json-file", log) == sum(e.dropped for e in got)
    assert "dropping output" in (logd / "logd.log").read_text()


# -- an interactive run: logged, and copied to the client FIFO while a client reads it


class _Client:
    """The attached CLI's end of a copy FIFO: a reader, as ``ClientEnds`` opens it."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self.got = bytearray()
        self.ended = False

    def read_some(self) -> bool:
        """Take what is there (waiting 0.1 s at most); whether the stream ended."""
        ready, _, _ = select.select([self.fd], [], [], 0.1)
        if ready:
            chunk = os.read(self.fd, 65536)
            self.ended = not chunk
            self.got += chunk
        return self.ended

    def until(self, wanted: bytes) -> None:
        wait_for(lambda: self.read_some() or wanted in self.got, timeout=30, what=repr(wanted))
        assert wanted in self.got

    def close(self) -> None:
        os.close(self.fd)


def _logged(log: Path) -> str:
    return "".join(m for _, m in _entries(log)) if log.exists() else ""


def _terminal_run(log: Path, copy: Path) -> tuple[str, int]:
    """Register a terminal task's run (stdout alone, copied to ``copy``); the shim's end."""
    copies = {"stdout": str(copy)}
    token, out, err = logdaemon_client.register(log, 64 << 20, 1, copies=copies)
    assert err == ""
    wo = os.open(out, os.O_WRONLY)
    _keep.append(os.open(out, os.O_RDONLY | os.O_NONBLOCK))
    return token, wo


def _write_in_thread(fd: int, data: bytes) -> threading.Thread:
    """The task's writes, which block while the daemon does not read."""

    def write() -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def test_a_terminal_run_is_logged_and_copied_to_its_client_until_its_end(
    logd: Path, tmp_path: Path
) -> None:
    log, copy = tmp_path / "t" / "task.log", tmp_path / "stdout"
    os.mkfifo(copy)
    client = _Client(copy)  # the starting client reads before the run is registered
    token, wo = _terminal_run(log, copy)
    os.write(wo, b"/ # echo hi\r\nhi\r\n/ # ")
    client.until(b"/ # ")
    os.close(wo)  # the task exited
    wait_for(client.read_some, timeout=30, what="the client's end of stream")
    assert bytes(client.got) == b"/ # echo hi\r\nhi\r\n/ # "
    client.close()
    logdaemon_client.wait_drained(log)
    assert _entries(log) == [
        ("stdout", "/ # echo hi\r\n"),
        ("stdout", "hi\r\n"),
        ("stdout", "/ # "),
    ]
    assert not (logd / logdaemon.STREAMS_DIR / f"{token}.json").exists()


def test_without_a_client_the_task_never_waits_and_a_later_one_sees_new_output(
    logd: Path, tmp_path: Path
) -> None:
    log, copy = tmp_path / "task.log", tmp_path / "stdout"
    os.mkfifo(copy)
    _, wo = _terminal_run(log, copy)  # detached: nobody reads the copy
    flood = b"".join(b"line %06d\n" % i for i in range(40_000))  # 440 KB, 7 pipes full
    writer = _write_in_thread(wo, flood)
    wait_for(lambda: not writer.is_alive(), timeout=60, what="the task's writes to finish")
    wait_for(lambda: _logged(log) == flood.decode(), timeout=60, what="the flood logged")
    client = _Client(copy)  # attach
    os.write(wo, b"after attach\n")
    client.until(b"after attach\n")
    client.close()  # detach: the next writes fail for the daemon, not the task
    writer = _write_in_thread(wo, flood)
    wait_for(lambda: not writer.is_alive(), timeout=60, what="the writes after detach")
    os.close(wo)
    logdaemon_client.wait_drained(log)
    assert bytes(client.got) == b"after attach\n"  # nothing older than the attach
    # A line may be cut in two entries where the pipe went quiet (PARTIAL_IDLE), not lost.
    assert _logged(log) == (flood + b"after attach\n" + flood).decode()


def test_a_slow_client_slows_the_task_and_loses_nothing(logd: Path, tmp_path: Path) -> None:
    log, copy = tmp_path / "task.log", tmp_path / "stdout"
    os.mkfifo(copy)
    client = _Client(copy)
    _, wo = _terminal_run(log, copy)
    data = b"".join(b"%07d\n" % i for i in range(100_000))  # 800 KB: the pipes fill
    writer = _write_in_thread(wo, data)
    wait_for(lambda: client.read_some() or len(client.got) >= len(data), timeout=60, what="all")
    writer.join()
    os.close(wo)
    wait_for(client.read_some, timeout=30, what="the client's end of stream")
    client.close()
    assert bytes(client.got) == data
    logdaemon_client.wait_drained(log)
    assert _logged(log) == data.decode()


@pytest.mark.parametrize(
    "lost", [BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "reset"), EOFError()]
)
def test_a_daemon_gone_mid_request_is_asked_again_after_a_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lost: Exception
) -> None:
    """A daemon going idle as a client came closes before it reads: EPIPE at the send.
    It once reached `ctrexec wait` as a bare BrokenPipeError, taken there for stdout's
    reader gone: exit 0 with no exit code printed (CI run of stop 44)."""
    answers: list[object] = [lost, {"read": 0}]
    started: list[Path] = []

    def exchange(path: Path, message: object, timeout: float) -> object:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    monkeypatch.setattr(logdaemon_client, "_exchange", exchange)
    monkeypatch.setattr(logdaemon_client, "spawn", started.append)
    assert logdaemon_client.request({"op": "settle"}, where=tmp_path) == {"read": 0}
    assert started == [tmp_path]
    answers[:] = [lost]
    assert logdaemon_client.request({"op": "settle"}, start=False, where=tmp_path) is None


def test_another_socket_error_is_a_ctrexec_error_that_keeps_its_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def exchange(path: Path, message: object, timeout: float) -> object:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(logdaemon_client, "_exchange", exchange)
    with pytest.raises(errors.FailedPrecondition, match="Permission denied") as raised:
        logdaemon_client.request({"op": "ping"}, where=tmp_path)
    assert isinstance(raised.value.__cause__, PermissionError)
