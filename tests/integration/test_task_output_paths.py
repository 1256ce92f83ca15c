"""Task output to paths the caller gives (``TaskConfig.stdout_path``/``stderr_path``),
as a scheduler such as Nomad hands its drivers: files, or FIFOs that the caller reads
and may stop reading for a while. The shim opens them itself, so no ctrexec process is
in the path.
"""

from __future__ import annotations

import os
import select
import time
from pathlib import Path

import pytest
from _cli import Cli
from _support import until

from ctrexec import Executor, TaskConfig
from ctrexec.containerd.client import Client
from ctrexec.errors import CtrexecError, FailedPrecondition, InvalidField

COUNTER = "i=0; while :; do echo line $i; i=$((i+1)); sleep 0.02; done"


@pytest.fixture
def executor(client: Client, tmp_path: Path) -> Executor:
    return Executor(client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")


def test_files_get_each_stream_and_logs_says_where(
    executor: Executor, test_image: str, tmp_path: Path, cli: Cli
) -> None:
    out, err = tmp_path / "out" / "stdout.txt", tmp_path / "stderr.txt"
    err.write_text("kept\n")  # an existing file is appended to
    name = "outpath-files"
    config = TaskConfig(
        name=name, image=test_image, command=["sh", "-c", "echo out; echo err >&2"],
        stdout_path=str(out), stderr_path=str(err),
    )  # fmt: skip
    executor.start_task(config)
    try:
        assert executor.wait(name).exit_code == 0
        until(lambda: out.read_text() == "out\n", "stdout in its file")
        until(lambda: err.read_text() == "kept\nerr\n", "stderr appended to its file")
        with pytest.raises(FailedPrecondition, match="ctrexec keeps no log"):
            executor.inspect(name).check_logs()  # a scheduler's tail asks first, as `logs`
        shown = cli("logs", name)
        assert shown.returncode == 125
        assert shown.stderr == (
            f"ctrexec: container {name} writes its output to {out} (stdout) and {err} (stderr);"
            " ctrexec keeps no log\n"
        )
    finally:
        executor.destroy(name, force=True)
    assert out.exists() and err.exists()  # the caller's files are the caller's


def _read_lines(fd: int, want: int, timeout: float = 30.0) -> list[str]:
    buf = b""
    deadline = time.monotonic() + timeout
    while buf.count(b"\n") < want:
        left = deadline - time.monotonic()
        assert left > 0, f"only {buf!r} read"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            buf += os.read(fd, 65536)
    return buf.decode().splitlines()


def test_a_fifo_reader_may_go_away_and_come_back(
    executor: Executor, test_image: str, tmp_path: Path
) -> None:
    """Nomad's logmon restarts with the client: the task neither blocks nor dies, and
    what it wrote meanwhile waits in the FIFO."""
    out, err = tmp_path / "stdout.fifo", tmp_path / "stderr.fifo"
    os.mkfifo(out)
    os.mkfifo(err)
    readers = [os.open(p, os.O_RDONLY | os.O_NONBLOCK) for p in (out, err)]
    name = "outpath-fifo"
    executor.start_task(
        TaskConfig(
            name=name, image=test_image, command=["sh", "-c", COUNTER],
            stdout_path=str(out), stderr_path=str(err),
        )
    )  # fmt: skip
    try:
        first = _read_lines(readers[0], 5)
        for fd in readers:
            os.close(fd)
        time.sleep(0.3)  # the task writes on with no reader (not an assertion)
        readers = [os.open(p, os.O_RDONLY | os.O_NONBLOCK) for p in (out, err)]
        later = _read_lines(readers[0], 30)
        assert executor.inspect(name).status.value == "running"
    finally:
        executor.destroy(name, force=True)
        for fd in readers:
            os.close(fd)
    numbers = [int(line.split()[1]) for line in first + later if line.startswith("line ")]
    # What was read is consecutive except where the reader was away: the lines written
    # then waited in the FIFO, so nothing is missing at all.
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))


def test_bad_paths_are_refused_before_anything_is_made(
    executor: Executor, test_image: str, tmp_path: Path
) -> None:
    with pytest.raises(InvalidField, match=r"stdout_path.*expected an absolute path"):
        TaskConfig(name="x", image=test_image, stdout_path="rel/out")
    with pytest.raises(InvalidField, match=r"log_driver.*keeps no log"):
        TaskConfig(name="x", image=test_image, stdout_path="/tmp/o", log_driver="none")
    (tmp_path / "dir").mkdir()
    name = "outpath-dir"
    with pytest.raises(CtrexecError, match="neither a file nor a FIFO"):
        executor.start_task(
            TaskConfig(
                name=name, image=test_image, command=["true"], stdout_path=str(tmp_path / "dir")
            )
        )
    assert name not in {t.id for t in executor.list(all_tasks=True)}
