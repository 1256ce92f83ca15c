"""AsyncExecutor's lifecycle calls take what the Executor's take: a keyword added to
one (``network=`` on create and start_task) must reach asyncio code too."""

from __future__ import annotations

import inspect

from ctrexec import AsyncExecutor, Executor

#: Calls of AsyncExecutor's own shape: awaited on futures, or iterators of their own.
OWN = {"wait", "events", "logs"}


def test_every_lifecycle_call_has_the_executors_parameters() -> None:
    mirrored = [
        name
        for name, member in vars(AsyncExecutor).items()
        if inspect.iscoroutinefunction(member) and name not in OWN
    ]
    assert {"create", "start_task", "stop", "destroy", "exec"} <= set(mirrored)
    for name in mirrored:
        theirs = inspect.signature(getattr(Executor, name)).parameters
        ours = inspect.signature(getattr(AsyncExecutor, name)).parameters
        assert [(p.name, p.kind, p.default) for p in ours.values()] == [
            (p.name, p.kind, p.default) for p in theirs.values()
        ], name
