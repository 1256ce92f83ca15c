"""The per-group lock (ctrexec.tasks.grouplock): re-entrant in a thread, exclusive
between threads and processes, bounded when asked, keyed by containerd and namespace."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from pathlib import Path

import attrs
import pytest

from ctrexec import errors
from ctrexec.tasks import grouplock


@attrs.frozen
class _Client:
    """What the lock reads of a client."""

    address: str
    namespace: str = "default"


def test_the_path_names_the_containerd_the_namespace_and_the_group(tmp_path: Path) -> None:
    a, b = _Client("/run/a.sock"), _Client("/run/b.sock")
    path = grouplock.lock_path(a, "web", tmp_path)  # type: ignore[arg-type]
    assert path.parent == tmp_path and path.name.endswith("-default-web.lock")
    assert path != grouplock.lock_path(b, "web", tmp_path)  # type: ignore[arg-type]
    other = grouplock.lock_path(_Client("/run/a.sock", "prod"), "web", tmp_path)  # type: ignore[arg-type]
    assert other != path


def test_reentrant_in_one_thread_exclusive_between_threads(tmp_path: Path) -> None:
    client = _Client(str(tmp_path / "c.sock"))
    order: list[str] = []
    inside = threading.Event()
    with grouplock.hold(client, "g", lock_dir=tmp_path):  # type: ignore[arg-type]
        with grouplock.hold(client, "g", lock_dir=tmp_path):  # type: ignore[arg-type]
            assert grouplock.is_held(client, "g", tmp_path)  # type: ignore[arg-type]

        def second() -> None:
            inside.set()
            with grouplock.hold(client, "g", lock_dir=tmp_path):  # type: ignore[arg-type]
                order.append("second")

        worker = threading.Thread(target=second)
        worker.start()
        inside.wait(30)
        worker.join(0.3)  # it must still wait: the first holds the lock
        order.append("first")
    worker.join(30)
    assert order == ["first", "second"]
    assert not grouplock.is_held(client, "g", tmp_path)  # type: ignore[arg-type]


def test_another_process_waits_is_told_and_a_bound_gives_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = _Client(str(tmp_path / "c.sock"))
    path = grouplock.lock_path(client, "g", tmp_path)  # type: ignore[arg-type]
    path.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl,sys,os; f=open(sys.argv[1],'a');"
         "fcntl.flock(f,fcntl.LOCK_EX); print('held',flush=True); sys.stdin.read()", str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert grouplock.busy(client, "g", tmp_path)  # type: ignore[arg-type]
        monkeypatch.setattr(grouplock, "NOTICE_AFTER", 0.0)
        with (
            caplog.at_level(logging.WARNING, "ctrexec.groups"),
            pytest.raises(errors.Unavailable, match="group g"),
            grouplock.hold(client, "g", wait=0.2, lock_dir=tmp_path),  # type: ignore[arg-type]
        ):
            pass
        assert caplog.messages == ["waiting for another ctrexec operation on group g"]
    finally:
        holder.communicate("", timeout=30)
    assert not grouplock.busy(client, "g", tmp_path)  # type: ignore[arg-type]
    with grouplock.hold(client, "g", wait=5, lock_dir=tmp_path):  # type: ignore[arg-type]
        pass  # free once its holder died


def test_a_task_in_no_group_takes_no_lock() -> None:
    before = dict(grouplock._held)
    with grouplock.of_record(_Client("/nonexistent/c.sock"), {}):  # type: ignore[arg-type]
        assert grouplock._held == before  # nothing was opened or locked


def test_a_lock_that_cannot_be_made_warns_and_lets_the_act_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the lock directory should be
    client = _Client(str(tmp_path / "c.sock"))
    with (
        caplog.at_level(logging.WARNING, "ctrexec.groups"),
        grouplock.hold(client, "g", lock_dir=blocked),  # type: ignore[arg-type]
    ):
        assert grouplock.is_held(client, "g", blocked)  # type: ignore[arg-type]
    assert "another operator is not kept out" in caplog.text
