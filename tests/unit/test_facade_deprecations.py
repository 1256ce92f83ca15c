"""Issue 38 took the front ends' helpers off the scheduler's facade (``Executor``); the
old methods keep working for one release and say what replaced them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from ctrexec import Client, ContainerLookup, Executor, ExitStatus, _rpc


class _NoCalls:
    def unary(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no call was expected")


def _executor(tmp_path: Path) -> Executor:
    client = Client(cast(_rpc.Connection, _NoCalls()), namespace="ns")
    return Executor(client, log_dir=tmp_path / "logs", state_dir=tmp_path / "state")


def test_with_oom_still_works_and_warns(tmp_path: Path) -> None:
    """Every exit ctrexec reports already carries ``oom_killed``; a non-SIGKILL exit
    costs no call."""
    exits = {"a": ExitStatus(exit_code=1)}
    with pytest.warns(DeprecationWarning, match=r"Executor\.with_oom is deprecated"):
        assert _executor(tmp_path).with_oom(exits) == exits


def test_lookup_still_works_and_warns(tmp_path: Path) -> None:
    ex = _executor(tmp_path)
    with pytest.warns(DeprecationWarning, match=r"Executor\.lookup is deprecated"):
        found = ex.lookup()
    assert isinstance(found, ContainerLookup)


def test_the_free_rename_still_works_and_warns(tmp_path: Path) -> None:
    """``ctrexec.rename(ex, old, new)`` warns, then does what ``ex.rename`` does: here it
    refuses the bad name before any call, as the method does."""
    import ctrexec

    ex = _executor(tmp_path)
    with (
        pytest.warns(DeprecationWarning, match=r"ctrexec\.rename is deprecated"),
        pytest.raises(ctrexec.InvalidArgument) as free,
    ):
        ctrexec.rename(ex, "a", "bad name!")
    with pytest.raises(ctrexec.InvalidArgument) as method:
        ex.rename("a", "bad name!")
    assert str(free.value) == str(method.value)
