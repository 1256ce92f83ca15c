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

The lifecycle's short requests (start, stop, destroy, exec, inspect, ...) have no future
to await: the gRPC client is synchronous, so each runs the Executor's own method in a
thread (``asyncio.to_thread``), and the Executor stays the one owner of every rule.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import AsyncIterator, Collection, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Generic, Protocol, Self, TypeVar, Unpack

from ctrexec.errors import DeadlineExceeded, NotFound
from ctrexec.logs.reader import STREAMS, LogEntry
from ctrexec.tasks.aiologs import TaskLog

if TYPE_CHECKING:
    from ctrexec.containerd.containers import Container
    from ctrexec.containerd.events import Event
    from ctrexec.containerd.execs import ExecResult
    from ctrexec.containerd.stats import Stats
    from ctrexec.containerd.tasks import ExitStatus
    from ctrexec.tasks.config import TaskConfig
    from ctrexec.tasks.events import EventOptions, TaskEvents
    from ctrexec.tasks.execspec import ExecOptions
    from ctrexec.tasks.executor import Executor
    from ctrexec.tasks.publishing import NetworkRequest
    from ctrexec.tasks.reports import TaskHandle, TaskInfo

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
    """The lifecycle of an :class:`~ctrexec.Executor` for asyncio code, none of it
    blocking the loop.

    ``wait`` (of a task with a run) and ``events`` await gRPC's own futures and
    streams. The rest has the names, parameters and results of the Executor's methods
    and runs them in a thread (``asyncio.to_thread``), because the gRPC client is
    synchronous; the Executor keeps every rule (auto-remove on stop, rollback of a failed
    start, ...). Cancelling such an awaiting coroutine raises CancelledError in it at
    once, but the call in the thread runs to its end: a cancelled ``stop`` still stops
    (and may remove) the task, a cancelled ``start_task`` may still start one.
    """

    def __init__(self, executor: Executor) -> None:
        self.executor = executor

    async def create(
        self,
        config: TaskConfig,
        *,
        owner_labels: Mapping[str, str] | None = None,
        network: NetworkRequest | None = None,
    ) -> Container:
        """:meth:`Executor.create` in a thread."""
        ex = self.executor
        return await asyncio.to_thread(
            ex.create, config, owner_labels=owner_labels, network=network
        )

    async def start_task(
        self,
        config: TaskConfig,
        *,
        owner_labels: Mapping[str, str] | None = None,
        network: NetworkRequest | None = None,
    ) -> TaskHandle:
        """:meth:`Executor.start_task` in a thread."""
        ex = self.executor
        return await asyncio.to_thread(
            ex.start_task, config, owner_labels=owner_labels, network=network
        )

    async def start_watched(
        self,
        task: TaskConfig | str,
        *,
        owner_labels: Mapping[str, str] | None = None,
        network: NetworkRequest | None = None,
    ) -> tuple[TaskHandle, asyncio.Future[ExitStatus]]:
        """:meth:`Executor.start_watched` in a thread; the exit is awaited on this loop."""
        ex = self.executor
        handle, future = await asyncio.to_thread(
            ex.start_watched, task, owner_labels=owner_labels, network=network
        )
        return handle, asyncio.wrap_future(future)

    async def start(self, task_id: str, *, by_policy: bool = False) -> TaskHandle:
        """:meth:`Executor.start` in a thread."""
        return await asyncio.to_thread(self.executor.start, task_id, by_policy=by_policy)

    async def stop(
        self, task_id: str, timeout: float | None = None, signal: int | str | None = None,
        *, remove: bool = True,
    ) -> ExitStatus | None:  # fmt: skip
        """:meth:`Executor.stop` in a thread: the loop runs on while the task has its
        ``timeout`` to exit before SIGKILL."""
        return await asyncio.to_thread(self.executor.stop, task_id, timeout, signal, remove=remove)

    async def destroy(self, task_id: str, *, force: bool = False, volumes: bool = False) -> None:
        """:meth:`Executor.destroy` in a thread."""
        await asyncio.to_thread(self.executor.destroy, task_id, force=force, volumes=volumes)

    async def signal(self, task_id: str, sig: int | str) -> None:
        """:meth:`Executor.signal` in a thread."""
        await asyncio.to_thread(self.executor.signal, task_id, sig)

    async def exec(
        self,
        task_id: str,
        args: Sequence[str],
        *,
        timeout: float | None = None,
        **options: Unpack[ExecOptions],
    ) -> ExecResult:
        """:meth:`Executor.exec` in a thread (a cancel leaves the command running to its
        end or ``timeout``)."""
        return await asyncio.to_thread(
            self.executor.exec, task_id, args, timeout=timeout, **options
        )

    async def inspect(self, task_id: str, *, addresses: bool = True) -> TaskInfo:
        """:meth:`Executor.inspect` in a thread."""
        return await asyncio.to_thread(self.executor.inspect, task_id, addresses=addresses)

    async def list(self, *, all_tasks: bool = False, addresses: bool = False) -> list[TaskInfo]:
        """:meth:`Executor.list` in a thread."""
        ex = self.executor
        return await asyncio.to_thread(ex.list, all_tasks=all_tasks, addresses=addresses)

    async def stats(self, task_id: str) -> Stats:
        """:meth:`Executor.stats` in a thread."""
        return await asyncio.to_thread(self.executor.stats, task_id)

    async def wait(
        self,
        task_id: str,
        timeout: float | None = None,
        *,
        exec_id: str = "",
        until_started: bool = False,
    ) -> ExitStatus:
        """The exit of the task (or of an exec); many may await one task at once.

        A task with a run is awaited on gRPC's future, with no thread. With no task,
        :meth:`Executor.wait` decides, in a thread (:mod:`ctrexec.tasks.runwait`): a
        kept exit, NotFound, or with ``until_started`` docker's wait of a created
        container (a cancel then leaves that thread waiting until ``timeout``, the
        task's exit or its removal).
        """
        future = self.executor.wait_future(task_id, exec_id=exec_id)
        what = f"{task_id} exec {exec_id}" if exec_id else task_id
        try:
            return await result_of(future, timeout, what=f"wait for {what}")
        except NotFound:
            if exec_id:
                raise
        ex = self.executor
        return await asyncio.to_thread(ex.wait, task_id, timeout, until_started=until_started)

    def logs(
        self,
        task_id: str,
        *,
        follow: bool = False,
        since: datetime | int | None = None,
        tail: int | None = None,
        streams: Collection[str] = STREAMS,
    ) -> contextlib.AbstractAsyncContextManager[AsyncIterator[LogEntry]]:
        """``async with ax.logs(id, follow=True) as entries: async for entry in entries``:
        the task's log as :func:`ctrexec.read_logs` reads it; with ``follow``, until the
        task's current run has exited and its log is whole (at once if it has no run)."""
        return _OpenLogs(self.executor, task_id, follow, (since, tail, streams))

    def events(
        self, **options: Unpack[EventOptions]
    ) -> contextlib.AbstractAsyncContextManager[AsyncIterator[Event]]:
        """``async with ax.events(groups=["web"]) as stream: async for event in stream``;
        live on entry, as :meth:`Executor.events` is when it returns."""
        return _OpenEvents(self.executor, options)


class _OpenLogs:
    """``async with ax.logs(...) as entries``: the record is read on entry (off the
    loop), the reader and its pump end on exit."""

    def __init__(
        self,
        executor: Executor,
        task_id: str,
        follow: bool,
        read: tuple[datetime | int | None, int | None, Collection[str]],
    ) -> None:
        self._executor, self._task_id, self._follow, self._read = executor, task_id, follow, read
        self._relay: Relay[LogEntry] | None = None

    async def __aenter__(self) -> Relay[LogEntry]:
        since, tail, streams = self._read
        source = await asyncio.to_thread(
            TaskLog.open, self._executor, self._task_id,
            follow=self._follow, since=since, tail=tail, streams=streams,
        )  # fmt: skip
        self._relay = Relay(source, asyncio.get_running_loop())
        return self._relay

    async def __aexit__(self, *exc: object) -> None:
        if self._relay is not None:
            await self._relay.aclose()
