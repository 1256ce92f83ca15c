"""The asyncio face of the executor: a thin adapter over the same core, not a second one.

Two adapters carry everything, and any new streaming verb plugs into them:

- :func:`result_of` awaits a :class:`concurrent.futures.Future` that the core completes
  from gRPC's thread (``asyncio.wrap_future``). No thread waits: 50 ``wait`` calls
  are 50 ``Tasks.Wait`` calls in flight. Cancelling the awaiting task cancels the
  future, which cancels the call; a timeout raises DeadlineExceeded. Neither is an exit.
- :class:`Relay` turns a blocking iterator that has a ``cancel()`` (an event stream, a
  process's output) into an async iterator, with one pump thread per stream (not per
  task), which hands items to the loop with ``call_soon_threadsafe``.

A streaming exec follows the same pattern: its process object's exit is
``Executor.wait_future(task_id, exec_id=...)`` (so ``await result_of(...)``), and each
of its output streams, given as a blocking iterator with ``cancel()``, is a ``Relay``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Generic, Protocol, Self, TypeVar, Unpack

from ctrexec.errors import DeadlineExceeded

if TYPE_CHECKING:
    from ctrexec.containerd.events import Event
    from ctrexec.containerd.tasks import ExitStatus
    from ctrexec.tasks.events import EventOptions, TaskEvents
    from ctrexec.tasks.executor import Executor

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Cancellable(Protocol[T_co]):
    """A blocking iterator that another thread can end (``TaskEvents``, an output stream)."""

    def __next__(self) -> T_co: ...

    def __iter__(self) -> Iterator[T_co]: ...

    def cancel(self) -> None: ...


async def result_of(
    future: concurrent.futures.Future[T], timeout: float | None = None, *, what: str = "call"
) -> T:
    """Await a core future; DeadlineExceeded after ``timeout`` seconds (the future is
    cancelled then, as when the awaiting task is cancelled)."""
    awaitable = asyncio.wrap_future(future)
    if timeout is None:
        return await awaitable
    try:
        return await asyncio.wait_for(awaitable, timeout)
    except TimeoutError as exc:
        raise DeadlineExceeded(f"{what} did not finish within {timeout:g}s") from exc


_END = object()


class Relay(AsyncIterator[T], Generic[T]):
    """An async iterator over a blocking :class:`Cancellable`, fed by one pump thread.

    The queue is unbounded: items are small and the source is a stream that cannot be
    paused without losing what containerd sends meanwhile. Use ``async with`` (or
    :meth:`aclose`) so the source is cancelled and the pump ends.
    """

    def __init__(self, source: Cancellable[T], loop: asyncio.AbstractEventLoop) -> None:
        self._source = source
        self._loop = loop
        self._queue: asyncio.Queue[tuple[object, BaseException | None]] = asyncio.Queue()
        self._ended = False
        self._pump = threading.Thread(target=self._run, name="ctrexec-aio-relay", daemon=True)
        self._pump.start()

    def _run(self) -> None:
        error: BaseException | None = None
        try:
            for item in self._source:
                self._loop.call_soon_threadsafe(self._queue.put_nowait, (item, None))
        except RuntimeError:  # the loop is closed: nobody listens any more
            self._source.cancel()
            return
        except BaseException as exc:  # handed to the awaiting side
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop is closed
            self._loop.call_soon_threadsafe(self._queue.put_nowait, (_END, error))

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T:
        if self._ended:
            raise StopAsyncIteration
        item, error = await self._queue.get()
        if item is _END:
            self._ended = True
            if error is not None:
                raise error
            raise StopAsyncIteration
        return item  # type: ignore[return-value]

    async def aclose(self) -> None:
        """Cancel the source and wait (without blocking the loop) for the pump to end."""
        self._source.cancel()
        while not self._ended:
            item, _error = await self._queue.get()
            self._ended = item is _END

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _OpenEvents:
    """``async with ax.events() as stream``: opened (live) on entry, closed on exit."""

    def __init__(self, executor: Executor, options: EventOptions) -> None:
        self._executor = executor
        self._options = options
        self._relay: Relay[Event] | None = None

    async def __aenter__(self) -> Relay[Event]:
        loop = asyncio.get_running_loop()
        # Subscribing blocks until containerd registered the stream: off the loop. A
        # stream that opens after the caller gave up is cancelled, not left running.
        handoff = threading.Lock()
        opened: list[TaskEvents] = []
        abandoned = threading.Event()

        def open_stream() -> TaskEvents:
            stream = self._executor.events(**self._options)
            with handoff:
                opened.append(stream)
                if abandoned.is_set():
                    stream.cancel()
            return stream

        try:
            stream = await loop.run_in_executor(None, open_stream)
        except asyncio.CancelledError:
            with handoff:
                abandoned.set()
                for late in opened:
                    late.cancel()
            raise
        self._relay = Relay(stream, loop)
        return self._relay

    async def __aexit__(self, *exc: object) -> None:
        if self._relay is not None:
            await self._relay.aclose()


class AsyncExecutor:
    """``wait`` and ``events`` of an :class:`~ctrexec.Executor`, for asyncio code.

    Everything else (start, stop, inspect) is a short request: call the executor's
    method, in the loop's executor if a round trip must not block the loop.
    """

    def __init__(self, executor: Executor) -> None:
        self.executor = executor

    async def wait(
        self, task_id: str, timeout: float | None = None, *, exec_id: str = ""
    ) -> ExitStatus:
        """The exit of the task (or of an exec); many may await one task at once."""
        future = self.executor.wait_future(task_id, exec_id=exec_id)
        what = f"{task_id} exec {exec_id}" if exec_id else task_id
        return await result_of(future, timeout, what=f"wait for {what}")

    def events(self, **options: Unpack[EventOptions]) -> _OpenEvents:
        """``async with ax.events(groups=["web"]) as stream: async for event in stream``;
        live on entry, as :meth:`Executor.events` is when it returns."""
        return _OpenEvents(self.executor, options)
