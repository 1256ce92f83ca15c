"""The dangling-container reconciler: this driver's containers that no allocation owns.

Nomad's docker driver removes containers with its labels that no task claims after a
client restart (a crash between create and the handle reaching Nomad, or an allocation
Nomad has forgotten). Here: a container with the driver's Nomad task label, not
claimed by a StartTask or RecoverTask of this plugin process, is removed once the
plugin has been up for ``creation_grace`` (time for Nomad to recover its tasks) and the
container itself is older than that (so a StartTask in flight is never raced). A dry
run only names them in the log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ctrexec import CtrexecError, NotFound, nomad_tasks
from ctrexec.nomad.config import DanglingPolicy

if TYPE_CHECKING:
    from ctrexec import Executor

log = logging.getLogger("ctrexec.nomad")


class Reconciler:
    """Every ``period``: one sweep, in a worker thread (it makes blocking calls)."""

    def __init__(
        self,
        executor: Executor,
        policy: DanglingPolicy,
        claimed: Callable[[], set[str]],
        in_thread: Callable[[Callable[[], list[str]]], Awaitable[list[str]]],
    ) -> None:
        self._executor = executor
        self._policy = policy
        self._claimed = claimed
        self._in_thread = in_thread
        self._since = time.monotonic()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._policy.period)
            if time.monotonic() - self._since < self._policy.creation_grace:
                continue
            try:
                await self._in_thread(self.sweep)
            except CtrexecError as exc:  # containerd away: the next period tries again
                log.warning("dangling containers: %s", exc)

    def dangling(self) -> list[str]:
        """This driver's containers no task of this process claims, past the grace."""
        now = datetime.now(UTC)
        claimed = self._claimed()
        out = []
        for t in nomad_tasks(self._executor.client):
            if t.container_id in claimed:
                continue
            age = (now - t.created_at).total_seconds() if t.created_at else 0.0
            if age >= self._policy.creation_grace:
                out.append(t.container_id)
        return out

    def sweep(self) -> list[str]:
        """Remove (or, in a dry run, name) what :meth:`dangling` finds; return it."""
        found = self.dangling()
        for cid in found:
            if self._policy.dry_run:
                log.info("dangling container kept (dry run)", extra={"container_id": cid})
                continue
            if cid in self._claimed():  # claimed since the listing
                continue
            try:
                self._executor.destroy(cid, force=True)
            except NotFound:
                continue
            log.info("removed dangling container", extra={"container_id": cid})
        return found
