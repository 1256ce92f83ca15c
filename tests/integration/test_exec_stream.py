"""Executor.exec_stream, attach and start_attached against real containerd and runc.

Every test checks that no exec FIFO directory is left (``ctrexec-exec-*`` under the
temp dir), on success, failure, timeout and exception alike.
"""

from __future__ import annotations

import os
import select
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from _support import until

from ctrexec import errors
from ctrexec.containerd import execs
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor

TASK = "xstream"
BOUND = 30.0


def _exec_dirs() -> list[Path]:
    return sorted(execs.FIFO_ROOT.glob(execs.FIFO_PREFIX + "*"))


@pytest.fixture
def ex(client: Client, tmp_path: Path, test_image: str) -> Iterator[Executor]:
    before = _exec_dirs()
    executor = Executor(client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
    executor.start_task(TaskConfig(name=TASK, image=test_image, command=("sleep", "600")))
    try:
        yield executor
    finally:
        executor.destroy(TASK, force=True)
    until(lambda: _exec_dirs() == before, "every exec FIFO directory removed")


def _read_until(stream: object, wanted: bytes, timeout: float = BOUND) -> bytes:
    """Read a Process stream until ``wanted`` appears (bounded), without a fixed sleep."""
    got = b""
    fd = stream.fileno()  # type: ignore[attr-defined]
    until_ok: list[bool] = []

    def more() -> bool:
        nonlocal got
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                until_ok.append(True)
            got += chunk
        return wanted in got or bool(until_ok)

    until(more, f"{wanted!r} on the stream", timeout=timeout)
    return got


def test_stdin_in_stdout_and_stderr_apart(ex: Executor) -> None:
    script = "read line; echo out:$line; echo err:$line >&2; exit 3"
    with ex.exec_stream(TASK, ["sh", "-c", script], stdin=True) as proc:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        proc.write(b"hello\n")
        status = proc.wait(BOUND)
        assert status.exit_code == 3
        assert proc.stdout.read() == b"out:hello\n"
        assert proc.stderr.read() == b"err:hello\n"
        assert proc.stdout.read() == b""  # EOF after the exit


def test_callbacks_get_all_output_before_wait_returns(ex: Executor) -> None:
    out: list[bytes] = []
    err: list[bytes] = []
    cmd = ["sh", "-c", "seq 1 20000; echo done >&2"]
    with ex.exec_stream(TASK, cmd, on_stdout=out.append, on_stderr=err.append) as proc:
        assert proc.stdout is None and proc.stderr is None
        assert proc.wait(BOUND).exit_code == 0
    text = b"".join(out).decode()
    assert text.splitlines() == [str(i) for i in range(1, 20001)]
    assert b"".join(err) == b"done\n"


def test_close_stdin_ends_input(ex: Executor) -> None:
    with ex.exec_stream(TASK, ["cat"], stdin=True) as proc:
        proc.write(b"abc\n")
        assert b"abc\n" in _read_until(proc.stdout, b"abc\n")
        assert proc.poll() is None  # cat still waits for more input
        proc.close_stdin()
        assert proc.wait(BOUND).exit_code == 0


def test_kill_and_wait_timeout(ex: Executor) -> None:
    with ex.exec_stream(TASK, ["sleep", "300"]) as proc:
        with pytest.raises(errors.DeadlineExceeded):
            proc.wait(0.2)
        proc.kill(signal.SIGTERM)
        assert proc.wait(BOUND).exit_code == 128 + signal.SIGTERM
    assert ex.inspect(TASK).status is Status.RUNNING


def test_exit_fd_turns_readable_at_the_exit(ex: Executor) -> None:
    with ex.exec_stream(TASK, ["sh", "-c", "exit 7"], on_stdout=lambda _b: None) as proc:
        ready, _, _ = select.select([proc.exit_fd], [], [], BOUND)
        assert ready == [proc.exit_fd]
        assert proc.poll() is not None and proc.wait(0).exit_code == 7


def test_tty_exec_merges_streams_and_resizes(ex: Executor) -> None:
    with ex.exec_stream(TASK, ["sh"], tty=True, stdin=True, size=(91, 27)) as proc:
        assert proc.stderr is None and proc.stdout is not None
        proc.write(b"stty size; echo to-err >&2; echo $TERM\n")
        _read_until(proc.stdout, b"xterm")
        proc.resize(120, 40)
        proc.write(b"stty size\n")
        assert b"40 120" in _read_until(proc.stdout, b"40 120")
        proc.write(b"exit 5\n")
        assert proc.wait(BOUND).exit_code == 5


def test_tty_initial_size(ex: Executor) -> None:
    with ex.exec_stream(TASK, ["stty", "size"], tty=True, size=(91, 27)) as proc:
        assert proc.wait(BOUND).exit_code == 0
        assert proc.stdout is not None
        assert b"27 91" in proc.stdout.read()


def test_missing_command_is_127_and_leaves_no_fifos(ex: Executor) -> None:
    before = _exec_dirs()
    with pytest.raises(errors.CommandNotFound):
        ex.exec_stream(TASK, ["/no/such/binary"])
    assert _exec_dirs() == before  # a failed start removes its directory at once


def test_exec_timeout_and_exception_paths_remove_fifos(ex: Executor) -> None:
    with pytest.raises(errors.DeadlineExceeded):
        ex.exec(TASK, ["sleep", "300"], timeout=0.5)
    with pytest.raises(RuntimeError), ex.exec_stream(TASK, ["sleep", "300"]) as proc:
        raise RuntimeError("the caller fails mid-stream")
    proc.kill()  # close() left it running (a detach); the watcher reaps it


def test_close_detaches_and_the_process_is_reaped(ex: Executor) -> None:
    proc = ex.exec_stream(TASK, ["sh", "-c", "sleep 1; exit 4"])
    proc.close()
    assert proc.wait(BOUND).exit_code == 4  # still watched after the detach


def test_many_execs_in_parallel(ex: Executor) -> None:
    results: list[int] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        res = ex.exec(TASK, ["sh", "-c", f"echo {i}; exit {i % 5}"])
        assert res.stdout == f"{i}\n".encode()
        with lock:
            results.append(res.exit_code)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BOUND)
    assert sorted(results) == sorted(i % 5 for i in range(12))


@pytest.fixture
def ix(client: Client, tmp_path: Path) -> Iterator[Executor]:
    executor = Executor(client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
    yield executor
    for info in executor.list(all_tasks=True):
        if info.id.startswith("xattach"):
            executor.destroy(info.id, force=True)


def test_start_attached_sees_output_of_a_task_that_exits_at_once(
    ix: Executor, test_image: str
) -> None:
    cfg = TaskConfig(name="xattach1", image=test_image, command=("echo", "early"), tty=True)
    handle, proc = ix.start_attached(cfg)
    with proc:
        assert proc.wait(BOUND).exit_code == 0
        assert proc.stdout is not None
        assert proc.stdout.read() == b"early\r\n"
    assert handle.id == "xattach1"


def test_attach_detach_attach_again(ix: Executor, test_image: str) -> None:
    cfg = TaskConfig(name="xattach2", image=test_image, command=("cat",), stdin_open=True)
    handle, first = ix.start_attached(cfg)
    with first:
        first.write(b"one\n")
        assert b"one\n" in _read_until(first.stdout, b"one\n")
    assert ix.inspect(handle.id).status is Status.RUNNING  # close() was a detach
    with ix.attach(handle.id) as second:
        second.write(b"two\n")
        assert b"two\n" in _read_until(second.stdout, b"two\n")
        second.close_stdin()
        assert second.wait(BOUND).exit_code == 0
    with pytest.raises(errors.FailedPrecondition):
        ix.attach(handle.id)


def test_attach_refuses_a_logged_task(ix: Executor, test_image: str) -> None:
    ix.start_task(TaskConfig(name="xattach3", image=test_image, command=("sleep", "60")))
    with pytest.raises(errors.FailedPrecondition):
        ix.attach("xattach3")


def test_big_output_through_the_stream_is_whole(ex: Executor) -> None:
    """A stream is a pipe: the process waits for the caller to read, and nothing is lost."""
    with ex.exec_stream(TASK, ["seq", "1", "200000"]) as proc:
        assert proc.stdout is not None
        data = proc.stdout.read()  # to EOF, far beyond any pipe buffer
        assert proc.wait(BOUND).exit_code == 0
    assert data.decode().splitlines() == [str(i) for i in range(1, 200001)]
