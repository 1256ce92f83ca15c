"""One events() stream watches 20 tasks while they exit in many ways, one is OOM-killed
and containerd is killed and restarted: every exit is seen once, with the right code.

Exits during the outage cannot be events (containerd was not there to publish them):
the stream says EventsMissed once it is live again, and the scheduler's loop
(tests/_eventlog.py) lists, which finds them. Runs on ``chaos_daemon``.
"""

from __future__ import annotations

import os
import secrets
import signal
from pathlib import Path

from _chaoslib import IMAGE, ChaosDaemon, wait_for
from _eventlog import EventLog
from _limits import HOG, OOM_LIMIT

from ctrexec.containerd.events import EventsMissed, TaskEvent
from ctrexec.containerd.tasks import Status
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor
from ctrexec.tasks.runs import GONE_AT_RESTART as GONE

SLEEP = ("sleep", "1000")


def _trap(code: int, sig: str = "TERM") -> tuple[str, ...]:
    return ("sh", "-c", f'trap "exit {code}" {sig}; while :; do sleep 0.1; done')


def test_one_stream_sees_every_exit_across_a_containerd_restart(
    chaos_daemon: ChaosDaemon, tmp_path: Path
) -> None:
    ex = Executor(chaos_daemon.client(), log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
    suite = secrets.token_hex(3)
    # name: (command, memory, expected exit code)
    plan: dict[str, tuple[tuple[str, ...], str | None, int]] = {
        **{
            f"ev-self{i}": (("sh", "-c", f"exit {c}"), None, c) for i, c in enumerate((0, 1, 2, 42))
        },
        **{f"ev-kill{i}": (SLEEP, None, 137) for i in range(4)},
        "ev-term": (_trap(33), None, 33),
        "ev-usr1": (_trap(44, "USR1"), None, 44),
        "ev-hup": (_trap(55, "HUP"), None, 55),
        "ev-oom": (HOG, OOM_LIMIT, 137),
        **{f"ev-outage{i}": (SLEEP, None, 137) for i in range(3)},
        **{f"ev-after{i}": (_trap(60 + i), None, 60 + i) for i in range(3)},
        **{f"ev-live{i}": (SLEEP, None, -1) for i in range(2)},  # never exit while watched
    }
    assert len(plan) == 20
    mine = plan.__contains__
    log = EventLog(ex, ex.events(labels={"suite": suite}), mine)
    pids: dict[str, int] = {}
    try:
        for name, (command, memory, _code) in plan.items():
            cfg = TaskConfig(
                name=name, image=IMAGE, command=command, memory=memory, labels={"suite": suite}
            )
            pids[name] = ex.start_task(cfg).pid
        for i in range(4):
            ex.signal(f"ev-kill{i}", "SIGKILL")
        for name, sig in (("ev-term", "SIGTERM"), ("ev-usr1", "SIGUSR1"), ("ev-hup", "SIGHUP")):
            ex.signal(name, sig)
        before = [n for n in plan if n.startswith(("ev-self", "ev-kill", "ev-t", "ev-u", "ev-h"))]
        log.await_exits([*before, "ev-oom"], "the exits before the outage")
        assert log.missed == 0

        chaos_daemon.kill()
        outage = [f"ev-outage{i}" for i in range(3)]
        for name in outage:  # containerd is away: only the kernel can kill them
            os.kill(pids[name], signal.SIGKILL)
        for name in outage:
            wait_for(lambda n=name: not Path(f"/proc/{pids[n]}").exists(), f"{name} to die")
        chaos_daemon.restart()
        wait_for(lambda: log.missed >= 1, "EventsMissed after the restart")
        log.await_exits(outage, "the outage's exits, found by listing")
        reasons = {name: ex.inspect(name).exit_reason for name in outage}

        after = [f"ev-after{i}" for i in range(3)]
        for name in after:
            ex.signal(name, "SIGTERM")
        log.await_exits(after, "the exits after the restart")
        for name in ("ev-live0", "ev-live1"):
            assert ex.inspect(name).status is Status.RUNNING
    finally:
        log.close()
        for info in ex.list(all_tasks=True):
            ex.destroy(info.id, force=True)

    assert log.errors == []
    want = {n: code for n, (_cmd, _mem, code) in plan.items() if code >= 0}
    for name in outage:  # 1.7+ delete a task whose shim has no process left as they start
        assert (log.exits[name].exit_code, reasons[name]) in ((137, None), (255, GONE)), name
        want[name] = log.exits[name].exit_code
    assert {n: s.exit_code for n, s in log.exits.items()} == want
    assert log.exits["ev-oom"].oom_killed
    assert not any(s.oom_killed for n, s in log.exits.items() if n != "ev-oom")
    # Each exit before and after the outage came as an event, once; the outage's by listing.
    event_exits = [e.task_id for e in log.events if isinstance(e, TaskEvent) and e.kind == "exit"]
    assert sorted(event_exits) == sorted(n for n in want if n not in outage)
    assert set(outage) <= log.listed
    missed = [e for e in log.events if isinstance(e, EventsMissed)]
    assert len(missed) >= 1 and all(m.since and m.at >= m.since for m in missed)


def test_a_wait_outlasts_a_containerd_restart_and_reports_no_false_exit(
    chaos_daemon: ChaosDaemon, tmp_path: Path
) -> None:
    ex = Executor(chaos_daemon.client(), log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
    try:
        victim = ex.start_task(TaskConfig(name="ev-w-victim", image=IMAGE, command=SLEEP))
        ex.start_task(TaskConfig(name="ev-w-bystander", image=IMAGE, command=SLEEP))
        victim_exit = ex.wait_future("ev-w-victim")
        bystander_exit = ex.wait_future("ev-w-bystander")
        chaos_daemon.kill()
        os.kill(victim.pid, signal.SIGKILL)  # dies while containerd is away
        wait_for(lambda: not Path(f"/proc/{victim.pid}").exists(), "the victim to die")
        assert not victim_exit.done()  # Unavailable is not an exit: the wait goes on
        chaos_daemon.restart()
        status = victim_exit.result(timeout=60)
        assert status.exited_at is not None
        # 1.6 keeps the task's exit; 1.7+ delete the task as they start, exit and all.
        reason = ex.inspect("ev-w-victim").exit_reason
        assert (status.exit_code, reason) in ((137, None), (255, GONE))
        # The bystander's wait was sent again too, and still waits: it never ran out.
        assert ex.inspect("ev-w-bystander").status is Status.RUNNING
        assert not bystander_exit.done()
        ex.signal("ev-w-bystander", "SIGKILL")
        assert bystander_exit.result(timeout=60).exit_code == 137
    finally:
        for info in ex.list(all_tasks=True):
            ex.destroy(info.id, force=True)
