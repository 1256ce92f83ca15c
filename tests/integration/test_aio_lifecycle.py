"""The asyncio face covers the lifecycle (start, exec, logs, stop, destroy, wait of a
task never started) and none of it blocks the loop: a stop that waits out its timeout
lets other coroutines run, and a cancelled call leaves the loop free."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from _support import gone, scratch_executor, until

from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.errors import NotFound
from ctrexec.tasks.aio import AsyncExecutor
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor

#: A task whose init ignores SIGTERM, so a stop waits out its timeout (10 s, far more
#: than a few ticks and a round trip need), then SIGKILLs.
STUBBORN = ("sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done")
#: Ticks of a concurrent coroutine that prove the loop ran while a call was pending.
TICKS = 5


@pytest.fixture
def ex(client: Client, tmp_path: Path, test_image: str) -> Iterator[Executor]:
    with scratch_executor(client, tmp_path, "al-") as executor:
        yield executor


async def _trapping(ax: AsyncExecutor, name: str) -> None:
    """Return once the task said ``ready``: its shell has set the trap, so a SIGTERM
    from now on is ignored (one sent before would end it at once)."""
    async with ax.logs(name, follow=True) as entries:
        async for entry in entries:
            if entry.message == "ready\n":
                return
    raise AssertionError(f"{name} ended without saying ready")


async def _ticks_while(call: asyncio.Task[object], ticks: int) -> int:
    """Tick until ``ticks`` ticks ran or ``call`` ended; return how many ran while
    ``call`` was still pending."""
    ran = 0
    while ran < ticks and not call.done():
        await asyncio.sleep(0.01)
        ran += 0 if call.done() else 1
    return ran


def test_start_exec_logs_stop_destroy_without_blocking_the_loop(
    ex: Executor, test_image: str
) -> None:
    name = "al-life"
    ax = AsyncExecutor(ex)
    cfg = TaskConfig(name=name, image=test_image, command=STUBBORN, stop_timeout=10)

    async def main() -> None:
        handle = await ax.start_task(cfg)
        assert handle.id == name
        assert (await ax.inspect(name)).status is Status.RUNNING
        result = await ax.exec(name, ["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (result.exit_code, result.stdout, result.stderr) == (3, b"out\n", b"err\n")
        assert [i.id for i in await ax.list() if i.id == name] == [name]
        await _trapping(ax, name)

        # The stop has 10 s of SIGTERM ignored before its SIGKILL; meanwhile the loop
        # ticks and even makes a round trip of its own.
        stop = asyncio.create_task(ax.stop(name))
        ticked = await _ticks_while(stop, TICKS)
        seen = await ax.inspect(name)
        assert not stop.done(), "the stop ended before the loop could run"
        assert ticked == TICKS
        assert seen.status is Status.RUNNING  # SIGTERM ignored: the stop is still waiting
        status = await stop
        assert status is not None and status.exit_code == 137  # killed at the timeout
        assert (await ax.inspect(name)).status is Status.STOPPED

        await ax.destroy(name)
        with pytest.raises(NotFound):
            await ax.inspect(name)

    asyncio.run(main())
    assert gone(ex.client, name)


def test_logs_follow_until_the_task_exits_and_read_plain(ex: Executor, test_image: str) -> None:
    name = "al-logs"
    ax = AsyncExecutor(ex)
    cmd = ("sh", "-c", "echo one; sleep 2; echo two; echo three >&2")
    cfg = TaskConfig(name=name, image=test_image, command=cmd)

    async def main() -> tuple[list[tuple[str, str]], list[str], bool]:
        await ax.start_task(cfg)
        # Follow ends by itself once the run exited and its log is whole.
        async with ax.logs(name, follow=True) as entries:
            followed = [(e.stream, e.message) async for e in entries]
        exited = (await ax.inspect(name)).status is Status.STOPPED
        async with ax.logs(name, tail=1, streams=["stdout"]) as entries:
            last = [e.message async for e in entries]
        return followed, last, exited

    followed, last, exited = asyncio.run(main())
    assert exited
    # Each stream in order; the two pipes' entries may interleave either way.
    assert [m for s, m in followed if s == "stdout"] == ["one\n", "two\n"]
    assert [m for s, m in followed if s == "stderr"] == ["three\n"]
    assert len(followed) == 3
    assert last == ["two\n"]


def test_leaving_a_followed_log_early_ends_it(ex: Executor, test_image: str) -> None:
    name = "al-logleave"
    ax = AsyncExecutor(ex)
    cfg = TaskConfig(name=name, image=test_image, command=STUBBORN)

    async def main() -> str:
        await ax.start_task(cfg)
        async with ax.logs(name, follow=True) as entries:
            async for entry in entries:
                return entry.message  # __aexit__ cancels the reader while the task runs
        return ""

    assert asyncio.run(main()) == "ready\n"
    assert ex.inspect(name).status is Status.RUNNING


def test_wait_until_started_waits_for_a_start_from_another_coroutine(
    ex: Executor, test_image: str
) -> None:
    name = "al-created"
    ax = AsyncExecutor(ex)
    cfg = TaskConfig(name=name, image=test_image, command=("sh", "-c", "exit 7"))

    async def main() -> int:
        await ax.create(cfg)
        with pytest.raises(NotFound, match="no run to wait on"):
            await ax.wait(name, timeout=30)  # without until_started: at once
        waiter = asyncio.create_task(ax.wait(name, timeout=60, until_started=True))
        ticked = await _ticks_while(waiter, TICKS)  # the loop is free while it waits
        assert ticked == TICKS, "the wait ended before any start"
        await ax.start(name)
        return (await waiter).exit_code

    assert asyncio.run(main()) == 7


def test_a_cancelled_stop_leaves_the_loop_free_and_still_stops(
    ex: Executor, test_image: str
) -> None:
    name = "al-cancel"
    ax = AsyncExecutor(ex)
    cfg = TaskConfig(name=name, image=test_image, command=STUBBORN, stop_timeout=10)

    async def main() -> Status:
        await ax.start_task(cfg)
        await _trapping(ax, name)
        stop = asyncio.create_task(ax.stop(name, remove=False))
        await _ticks_while(stop, 1)
        stop.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stop
        # The loop is free at once: a round trip, while the thread's stop still waits.
        seen = (await ax.inspect(name)).status
        ticked = 0
        while ticked < TICKS:
            await asyncio.sleep(0.01)
            ticked += 1
        return seen

    # asyncio.run ends by joining the default executor: the thread's stop ran to its end.
    assert asyncio.run(main()) is Status.RUNNING
    until(lambda: ex.inspect(name).status is Status.STOPPED, "the cancelled stop's kill")
    assert ex.inspect(name).exit is not None


def test_start_watched_awaits_an_exit_removed_before_anyone_waited(
    ex: Executor, test_image: str
) -> None:
    """The asyncio face of Executor.start_watched: the exit of a task removed as it
    exited (what the supervisor does to an ``--rm`` one) is awaited on the loop."""
    name = "al-watched"
    ax = AsyncExecutor(ex)
    cfg = TaskConfig(name=name, image=test_image, command=("sh", "-c", "exit 4"))

    async def main() -> None:
        _handle, exited = await ax.start_watched(cfg)
        # Awaited, not the Executor's inspect: its address lookup (pyroute2) runs an
        # event loop of its own, which it can't inside this one.
        async with asyncio.timeout(60):
            while (await ax.inspect(name, addresses=False)).status is not Status.STOPPED:
                await asyncio.sleep(0.05)
        await ax.destroy(name)
        assert (await asyncio.wait_for(exited, 30)).exit_code == 4

    asyncio.run(main())
    assert gone(ex.client, name)
