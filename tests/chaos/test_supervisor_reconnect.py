"""The supervisor across containerd restarts: it reconnects without leaking threads.

Runs on ``chaos_daemon`` (a private containerd): killing the session's daemon would
disturb every other test.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from _chaoslib import IMAGE, ChaosDaemon, wait_for

from ctrexec.containerd.tasks import Status
from ctrexec.groups.supervisor import Supervisor
from ctrexec.tasks.config import RestartPolicy, TaskConfig
from ctrexec.tasks.executor import Executor

CYCLES = 5
#: How long each outage lasts: the supervisor retries every 0.1 s meanwhile.
OUTAGE = 1.0


def _threads() -> str:
    return ", ".join(sorted(t.name for t in threading.enumerate()))


def test_supervisor_reconnects_without_leaking_threads(
    chaos_daemon: ChaosDaemon, tmp_path: Path
) -> None:
    name = "sup-reconnect"
    ex = Executor(chaos_daemon.client(), log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
    ex.start_task(
        TaskConfig(
            name=name,
            image=IMAGE,
            command=("sleep", "1000"),
            restart=RestartPolicy(policy="always", delay=0.1),
        )
    )
    before = threading.active_count()
    sup = Supervisor(ex, reconnect_delay=0.1)
    stop = threading.Event()
    runner = threading.Thread(target=sup.run, args=(stop,), name="test-supervisor", daemon=True)
    runner.start()
    try:
        # Idle and subscribed: its own thread, the stop watcher, gRPC's stream thread.
        time.sleep(1.0)
        idle = threading.active_count()
        for cycle in range(1, CYCLES + 1):
            chaos_daemon.kill()
            time.sleep(OUTAGE)
            chaos_daemon.restart()
            pid = wait_for(lambda: ex.inspect(name).pid, "the task after the restart")
            ex.signal(name, "SIGKILL")
            wait_for(
                lambda pid=pid: (
                    (info := ex.inspect(name)).status is Status.RUNNING and info.pid != pid
                ),
                f"a restart by policy after reconnect {cycle}",
            )
            wait_for(lambda c=cycle: sup.restarts == c, f"restart {cycle} counted")
        assert ex.inspect(name).labels["io.ctrexec.restart.count"] == str(CYCLES)
        wait_for(
            lambda: threading.active_count() <= idle,
            f"the thread count back to {idle} (now {threading.active_count()}: {_threads()})",
            timeout=10,
        )
    finally:
        stop.set()
        runner.join(timeout=30)
        ex.destroy(name, force=True)
    assert not runner.is_alive()
    wait_for(
        lambda: threading.active_count() <= before,
        f"the thread count back to {before} after stop (now {_threads()})",
        timeout=10,
    )
