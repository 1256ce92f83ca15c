"""``ctrexec rm -f`` of many containers with ``--restart always`` under a running
supervisor (issue 40): every task is marked stopped by the user before the kills, so
the supervisor restarts none of those awaiting removal, and its event stream lives on.

The ``rm`` is the real CLI in its own process, its first removal held back a second
(:data:`SLOW_FIRST_REMOVAL`): the kills are all sent by then, so a supervisor that did
not see the mark would restart every one in that window, and not only under load.

The supervisor's own count of the restarts it made (``Supervisor.restarts``, bumped
once a restart's task has started) is the state checked: a sentinel killed after the
``rm`` is restarted by the same stream, which proves the stream still serves, and
makes its restart the only one counted.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from _cli import CLI_PROG, Cli
from _support import gone, supervising, until

from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.tasks.config import RestartPolicy, TaskConfig
from ctrexec.tasks.executor import Executor

pytestmark = pytest.mark.integration

NAMES = [f"srf-{i}" for i in range(6)]
SENTINEL = "srf-sentinel"
#: ``ctrexec ARGS`` whose first removal waits ``argv[1]`` seconds before it begins.
SLOW_FIRST_REMOVAL = """
import sys, time
from ctrexec.cli.main import main
from ctrexec.tasks import stale
destroy, held = stale.destroy, []
def slow(*args, **kwargs):
    if not held:
        held.append(True)
        time.sleep(float(sys.argv[1]))
    return destroy(*args, **kwargs)
stale.destroy = slow
sys.exit(main(sys.argv[2:]))
"""


def _run_always(ex: Executor, name: str, image: str) -> None:
    """A task restarted on every exit, after docker's shortest delay (100 ms): sooner
    than a removal of several ends, so a restart by mistake has its time to happen."""
    always = RestartPolicy(policy="always", delay=0)
    ex.start_task(TaskConfig(name=name, image=image, command=("sleep", "1000"), restart=always))


def test_rm_force_of_many_is_not_fought_by_the_supervisor(
    client: Client,
    cli: Cli,
    test_image: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ex = Executor(client, log_dir=tmp_path / "logs")  # the CLI's log dir, as its supervisor's
    try:
        for name in [*NAMES, SENTINEL]:
            _run_always(ex, name, test_image)
        before = {name: ex.inspect(name) for name in NAMES}
        assert {(i.status, i.run, i.restart_count) for i in before.values()} == {
            (Status.RUNNING, 1, 0)
        }
        with caplog.at_level(logging.INFO, "ctrexec"), supervising(ex) as sup:
            until(lambda: "events are live" in caplog.text, "the supervisor's stream")
            argv = cli.argv("rm", "-f", *NAMES)[len(CLI_PROG) :]
            out = subprocess.run(
                [sys.executable, "-c", SLOW_FIRST_REMOVAL, "1", *argv],
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert (out.returncode, out.stdout) == (0, "".join(f"{n}\n" for n in NAMES)), out.stderr
            until(lambda: all(gone(client, n) for n in NAMES), "every record removed")
            # The same stream hears the next exit: the sentinel is restarted, once.
            pid = ex.inspect(SENTINEL).pid
            assert pid
            ex.signal(SENTINEL, "SIGKILL")
            until(
                lambda: (
                    sup.restarts >= 1
                    and (i := ex.inspect(SENTINEL)).status is Status.RUNNING
                    and i.pid != pid
                ),
                "the sentinel restarted",
                timeout=60,
            )
            assert ex.inspect(SENTINEL).run == 2
            assert sup.restarts == 1, "a container being removed was restarted"
            assert sup.pending == set()
            assert all(gone(client, n) for n in NAMES)  # none came back
        assert "event stream ended" not in caplog.text
    finally:
        cli("rm", "-f", *NAMES, SENTINEL)
