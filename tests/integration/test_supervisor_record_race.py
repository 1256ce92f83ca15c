"""A record removed outside ctrexec while the supervisor handles its task's exit.

``ctr task delete --force`` then ``ctr container rm`` (tests/chaos/test_integrity_members.py)
can land the removal between the supervisor's read of the record and its "restart
pending" write. That write's NotFound used to end the supervisor's event stream: the
record's deletion event went with it, so the supervisor never said the record was
deleted outside ctrexec nor removed its files (CI, containerd 2.1, under load). Here
the removal is made to land exactly there.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Mapping
from pathlib import Path

import pytest
from _support import scratch_executor, supervising, until

from ctrexec import labels as lbl
from ctrexec.containerd import containers, tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.errors import NotFound
from ctrexec.tasks.config import RestartPolicy, TaskConfig

ALWAYS = RestartPolicy(policy="always")


def test_a_record_removed_while_its_exit_is_handled_is_reported_and_the_stream_lives_on(
    client: Client,
    test_image: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    raced, other = "srr-raced", "srr-other"
    original = containers.update_labels
    removed = threading.Event()

    def removal_first(
        c: Client, container_id: str, labels: Mapping[str, str | None]
    ) -> containers.Container:
        """The supervisor's "restart pending" write, with ``ctr container rm`` just before."""
        if container_id == raced and labels.get(lbl.RESTART_PENDING) and not removed.is_set():
            containers.delete(c, container_id)
            removed.set()
        return original(c, container_id, labels)

    with scratch_executor(client, tmp_path, "srr-") as ex:
        for name in (raced, other):
            ex.start_task(TaskConfig(name=name, image=test_image, command=("sleep", "1000"),
                                     restart=ALWAYS))  # fmt: skip
        log_dir = Path(ex.inspect(raced).log_path).parent
        monkeypatch.setattr(containers, "update_labels", removal_first)
        try:
            with caplog.at_level(logging.INFO, "ctrexec"), supervising(ex):
                until(lambda: "events are live" in caplog.text, "the supervisor's stream")
                tasks.force_delete(client, raced)  # as `ctr task delete --force`
                until(removed.is_set, "the record removed as its exit is handled")
                said = f"{raced} was deleted outside ctrexec; removed its log and host files"
                until(lambda: said in caplog.text, "the supervisor to say the record went")
                assert not log_dir.exists()
                # The same stream hears the next exit: the other task is restarted.
                pid = ex.inspect(other).pid
                assert pid
                os.kill(pid, signal.SIGKILL)  # this test's own task
                until(
                    lambda: (i := ex.inspect(other)).status is Status.RUNNING and i.pid != pid,
                    "the other task restarted",
                    timeout=60,
                )
            assert "event stream ended" not in caplog.text
        finally:
            with contextlib.suppress(NotFound):  # its snapshot, left as `ctr` leaves it
                ex.destroy(raced, force=True)
