"""The asyncio adapters on plain futures and iterators (the daemon-backed tests are in
tests/integration/test_wait_aio.py)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Iterator

import pytest

from ctrexec.errors import DeadlineExceeded, Unavailable
from ctrexec.tasks.aio import Relay, result_of
from ctrexec.testing import wait_for


class Source:
    """A blocking iterator another thread can cancel, as TaskEvents is."""

    def __init__(self) -> None:
        self.items: queue.Queue[object] = queue.Queue()
        self.cancelled = threading.Event()

    def __iter__(self) -> Iterator[object]:
        return self

    def __next__(self) -> object:
        item = self.items.get()
        if item is StopIteration or self.cancelled.is_set():
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def cancel(self) -> None:
        self.cancelled.set()
        self.items.put(StopIteration)


def test_result_of_a_future_completed_from_another_thread() -> None:
    async def main() -> int:
        future: concurrent.futures.Future[int] = concurrent.futures.Future()
        threading.Timer(0.01, future.set_result, args=(7,)).start()
        return await result_of(future)

    assert asyncio.run(main()) == 7


def test_timeout_and_cancel_cancel_the_core_future() -> None:
    async def main() -> None:
        timed: concurrent.futures.Future[int] = concurrent.futures.Future()
        with pytest.raises(DeadlineExceeded, match="wait for x did not finish"):
            await result_of(timed, 0.01, what="wait for x")
        assert timed.cancelled()

        pending: concurrent.futures.Future[int] = concurrent.futures.Future()
        task = asyncio.ensure_future(result_of(pending))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pending.cancelled()

    asyncio.run(main())


def test_relay_keeps_order_passes_errors_and_ends() -> None:
    async def main() -> list[object]:
        source = Source()
        relay: Relay[object] = Relay(source, asyncio.get_running_loop())
        for item in (1, 2, 3, Unavailable("gone")):
            source.items.put(item)
        got: list[object] = []
        with pytest.raises(Unavailable):
            async for item in relay:
                got.append(item)
        with pytest.raises(StopAsyncIteration):
            await relay.__anext__()
        return got

    assert asyncio.run(main()) == [1, 2, 3]


def test_relay_close_cancels_the_source_and_the_pump_ends() -> None:
    before = threading.active_count()

    async def main() -> Source:
        source = Source()
        async with Relay(source, asyncio.get_running_loop()) as relay:
            source.items.put("a")
            assert await relay.__anext__() == "a"
        return source

    source = asyncio.run(main())
    assert source.cancelled.is_set()
    # The pump returns right after handing over its end marker.
    wait_for(lambda: threading.active_count() <= before, timeout=10, what="the pump thread to end")
