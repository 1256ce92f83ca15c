"""Waiting a scheduler can use: many waiters on one task, timeouts and cancels that are
not exits, and the asyncio face waiting on 50 tasks with no thread per task."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from _support import scratch_executor, until

from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import ExitStatus, Status
from ctrexec.errors import DeadlineExceeded, NotFound
from ctrexec.tasks.aio import AsyncExecutor
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor

MANY = 50
#: Threads beyond the test's own that may exist while waiting: gRPC's channel poller
#: (and a spare). A thread per waiter would be 50.
GRPC_THREADS = 2


@pytest.fixture
def ex(client: Client, tmp_path: Path, test_image: str) -> Iterator[Executor]:
    with scratch_executor(client, tmp_path, "wt-") as executor:
        yield executor


def _sleeper(ex: Executor, image: str, name: str) -> None:
    ex.start_task(TaskConfig(name=name, image=image, command=("sleep", "1000")))


def test_many_threads_wait_on_one_task(ex: Executor, test_image: str) -> None:
    name = "wt-many"
    _sleeper(ex, test_image, name)
    results: list[ExitStatus] = []
    lock = threading.Lock()
    armed = threading.Barrier(9)

    def waiter() -> None:
        armed.wait()
        status = ex.wait(name, timeout=60)
        with lock:
            results.append(status)

    threads = [threading.Thread(target=waiter) for _ in range(8)]
    for t in threads:
        t.start()
    shared = ex.wait_future(name)  # one future, many readers, too
    armed.wait()
    with pytest.raises(DeadlineExceeded, match="did not exit within"):
        ex.wait(name, timeout=0.2)  # a timeout is not an exit...
    assert ex.inspect(name).status is Status.RUNNING  # ...and touches nothing
    ex.signal(name, "SIGKILL")
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 8
    assert {(r.exit_code, r.exited_at) for r in results} == {(137, results[0].exited_at)}
    assert shared.result(timeout=30) == results[0]
    # A stopped task answers at once with the exit it keeps.
    assert ex.wait(name, timeout=30) == results[0]


def test_a_cancelled_wait_is_not_an_exit(ex: Executor, test_image: str) -> None:
    name = "wt-cancel"
    _sleeper(ex, test_image, name)
    future = ex.wait_future(name)
    assert future.cancel()
    with pytest.raises(concurrent.futures.CancelledError):
        future.result(timeout=1)
    assert ex.inspect(name).status is Status.RUNNING
    later = ex.wait_future(name)  # a new wait still sees the real exit
    ex.signal(name, "SIGKILL")
    assert later.result(timeout=30).exit_code == 137


def test_waiting_on_a_task_that_does_not_exist(ex: Executor) -> None:
    with pytest.raises(NotFound):
        ex.wait("wt-nothing", timeout=30)


def test_asyncio_waits_on_fifty_tasks_without_a_thread_each(ex: Executor, test_image: str) -> None:
    names = [f"wt-aio-{i:02d}" for i in range(MANY)]
    for name in names:
        # Each exits with its own code once told to: 10 + its index.
        code = 10 + names.index(name)
        cfg = TaskConfig(
            name=name,
            image=test_image,
            command=("sh", "-c", f'trap "exit {code}" TERM; while :; do sleep 0.1; done'),
        )
        ex.start_task(cfg)
    ax = AsyncExecutor(ex)
    before = threading.active_count()

    async def main() -> tuple[list[ExitStatus], int, bool]:
        waits = [asyncio.ensure_future(ax.wait(n)) for n in names]
        timed_out = asyncio.ensure_future(ax.wait(names[0], timeout=0.2))
        cancelled = asyncio.ensure_future(ax.wait(names[1]))
        await asyncio.sleep(0)  # every wait has sent its Tasks.Wait now
        with pytest.raises(DeadlineExceeded):
            await timed_out
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        # All 50 are waiting: count the threads while they do.
        busiest = threading.active_count()
        still_running = all(not w.done() for w in waits)
        loop = asyncio.get_running_loop()
        for name in names:
            await loop.run_in_executor(None, ex.signal, name, "SIGTERM")
        return list(await asyncio.gather(*waits)), busiest, still_running

    results, busiest, still_running = asyncio.run(main())
    assert still_running, "a wait ended before its task was told to exit"
    assert busiest <= before + GRPC_THREADS, f"{busiest} threads while waiting ({before} before)"
    assert [r.exit_code for r in results] == [10 + i for i in range(MANY)]
    until(lambda: all(ex.inspect(n).status is Status.STOPPED for n in names), "all stopped")


def test_asyncio_events(ex: Executor, test_image: str) -> None:
    name = "wt-aio-ev"
    ax = AsyncExecutor(ex)

    async def main() -> list[str]:
        async with ax.events(tasks=[name], types=["start", "exit"]) as stream:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, _sleeper, ex, test_image, name)
            await loop.run_in_executor(None, ex.signal, name, "SIGKILL")
            kinds = []
            async for event in stream:
                kinds.append(event.kind)
                if event.kind == "exit":
                    break
            return kinds

    assert asyncio.run(main()) == ["start", "exit"]
