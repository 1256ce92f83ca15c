"""Task exits as asyncio futures: one containerd Wait per task, any number of waiters.

Nomad holds a WaitTask call open for each task's whole life, calls it again after
every plugin restart and may call it concurrently. Each task gets one exit future
(:meth:`ctrexec.Executor.wait_future`: containerd's Wait, armed, no thread); its
completion resolves one asyncio future
that every WaitTask awaits behind a shield, so a waiter whose call is cancelled
(the agent stopping) goes away without ending the wait for the others, and is not
mistaken for an exit.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import CancelledError, Future
from typing import TYPE_CHECKING

from ctrexec import Canceled, CtrexecError, ExitStatus

if TYPE_CHECKING:
    from ctrexec import Executor


class ExitWaiters:
    def __init__(self, executor: Executor, loop: asyncio.AbstractEventLoop) -> None:
        self._executor = executor
        self._loop = loop
        self._futures: dict[str, asyncio.Future[ExitStatus]] = {}
        self._pending: dict[str, Future[ExitStatus]] = {}

    def arm(self, container_id: str) -> asyncio.Future[ExitStatus]:
        """The task's exit future, arming containerd's Wait on first use (from the loop)."""
        fut = self._futures.get(container_id)
        if fut is not None and not (fut.done() and fut.exception() is not None):
            return fut
        fut = self._loop.create_future()
        self._futures[container_id] = fut
        pending = self._executor.wait_future(container_id)
        self._pending[container_id] = pending

        def done(p: Future[ExitStatus]) -> None:  # on gRPC's thread
            self._loop.call_soon_threadsafe(self._settle, container_id, fut, p)

        pending.add_done_callback(done)
        return fut

    def _settle(
        self, container_id: str, fut: asyncio.Future[ExitStatus], pending: Future[ExitStatus]
    ) -> None:
        if fut.done():
            return
        try:
            fut.set_result(pending.result(0))
        except CancelledError:  # forgotten: the task was destroyed
            fut.set_exception(Canceled(f"the wait for {container_id} was cancelled"))
        except CtrexecError as exc:
            # containerd went away or the task was deleted: the next arm retries.
            fut.set_exception(exc)
        finally:
            if self._futures.get(container_id) is fut and fut.exception() is not None:
                self._futures.pop(container_id, None)

    async def wait(self, container_id: str) -> ExitStatus:
        return await asyncio.shield(self.arm(container_id))

    def forget(self, container_id: str) -> None:
        """After DestroyTask: cancel containerd's Wait; waiters see the task is gone."""
        self._futures.pop(container_id, None)
        pending = self._pending.pop(container_id, None)
        if pending is not None:
            pending.cancel()
