"""What the CLI's ``cp``, ``top``, ``stats`` and ``volume`` verbs do, through the public
API alone (issue 38: the CLI is built on it, so a scheduler can do the same): files in
and out of a running and a stopped task, its processes, its network counters, and
named volumes with the containers that use them."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from _support import scratch_executor

from ctrexec import (
    Client,
    Conflict,
    Executor,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    TaskConfig,
    Volumes,
)
from ctrexec.testing import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def ex(client: Client, tmp_path: Path, test_image: str) -> Iterator[Executor]:
    with scratch_executor(client, tmp_path, "hs-") as executor:
        yield executor


def test_copy_in_and_out_of_a_running_then_a_stopped_task(
    ex: Executor, test_image: str, tmp_path: Path
) -> None:
    ex.start_task(TaskConfig(name="hs-cp", image=test_image, command=("sleep", "1000")))
    src = tmp_path / "in.txt"
    src.write_text("from the host\n")
    ex.copy_in("hs-cp", src, "/tmp/in.txt")  # a Path for the host's side
    assert ex.exec("hs-cp", ["cat", "/tmp/in.txt"]).stdout == b"from the host\n"
    assert ex.exec("hs-cp", ["stat", "-c", "%u", "/tmp/in.txt"]).stdout == b"0\n"

    ex.stop("hs-cp", timeout=1)
    out = tmp_path / "out.txt"
    ex.copy_out("hs-cp", "/tmp/in.txt", str(out))  # a stopped task's snapshot
    assert out.read_text() == "from the host\n"

    sink = io.BytesIO()
    ex.copy_out("hs-cp", "/tmp/in.txt", "-", stdout=sink)
    sink.seek(0)
    with tarfile.open(fileobj=sink) as tar:
        assert tar.getnames() == ["in.txt"]

    with pytest.raises(NotFound):
        ex.copy_out("hs-cp", "/no/such/file", str(tmp_path / "x"))


def test_processes_top_and_net_io_of_a_running_task(ex: Executor, test_image: str) -> None:
    ex.start_task(TaskConfig(name="hs-top", image=test_image, command=("sleep", "1000")))
    # The start returns once runc let its init go; the init may still be ``runc init``
    # until it has exec'd the command: wait for that, bounded.
    wait_for(
        lambda: [p.command for p in ex.processes("hs-top")] == ["sleep 1000"],
        timeout=30,
        what="the task's init to exec sleep",
    )
    procs = ex.processes("hs-top")
    assert [p.command for p in procs] == ["sleep 1000"]  # it stays so: sleep runs on
    assert procs[0].pid == ex.inspect("hs-top").pid and procs[0].user == "root"

    titles, rows = ex.top("hs-top", ["-o", "pid,comm"])
    assert titles == ["PID", "COMMAND"]
    assert rows == [[str(procs[0].pid), "sleep"]]
    with pytest.raises(InvalidArgument):
        ex.top("hs-top", ["-o", "comm"])  # no PID column

    rx_tx = ex.net_io("hs-top")
    assert rx_tx is not None and all(n >= 0 for n in rx_tx)

    ex.stop("hs-top", timeout=1)
    with pytest.raises(FailedPrecondition):
        ex.processes("hs-top")
    assert ex.net_io("hs-top") is None


def test_volumes_and_the_containers_that_use_them(
    ex: Executor, client: Client, test_image: str
) -> None:
    volumes = Volumes(client)
    made = volumes.create("hs-data", labels={"tier": "db"})
    try:
        assert volumes.create("hs-data") == made  # a taken name is that volume
        assert volumes.get("hs-data").labels == {"tier": "db"}
        assert "hs-data" in [v.name for v in volumes.list(filters=["dangling=true"])]
        assert [v.name for v in volumes.list(filters=["label=tier=db", "name=hs-"])] == ["hs-data"]

        ex.create(
            TaskConfig(name="hs-vol", image=test_image, command=("true",),
                       volumes=("hs-data:/data",))
        )  # fmt: skip
        assert "hs-data" not in [v.name for v in volumes.list(filters=["dangling=true"])]
        with pytest.raises(Conflict):
            volumes.remove("hs-data")
        assert "hs-data" not in volumes.prune(everything=True)
        ex.destroy("hs-vol")
    finally:
        volumes.remove("hs-data", force=True)
    with pytest.raises(NotFound):
        volumes.get("hs-data")
    volumes.remove("hs-data", force=True)  # a missing one passes, forced
