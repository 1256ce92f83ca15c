"""Waiting and supervising, as the task tests (executor, groups, --rm, supervisor) do."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ctrexec.executor import Executor
from ctrexec.supervisor import Supervisor
from ctrexec.testing import wait_for


def until(predicate: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    """Await state that containerd or the kernel reaches asynchronously, with a bound."""
    wait_for(predicate, timeout=timeout, what=what)


@contextlib.contextmanager
def supervising(ex: Executor, **options: Any) -> Iterator[Supervisor]:
    """A Supervisor running in a thread for the block, as ``ctrexec supervise`` would."""
    sup = Supervisor(ex, **{"reconnect_delay": 0.2, **options})
    stop = threading.Event()
    thread = threading.Thread(target=sup.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield sup
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive(), "the supervisor did not stop"
