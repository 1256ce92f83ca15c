"""``group down`` stops its tasks together: every task has had its stop signal before
the first one is killed, also past the 32 threads a stop of many uses. Checked by
order, in one file the tasks append to, not by how long the command took."""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import Cli

from ctrexec.testing import wait_for

pytestmark = pytest.mark.integration


def _stubborn(name: str) -> str:
    """Notes SIGTERM, then says it is alive every 0.1 s until SIGKILL ends it."""
    return (
        f"trap 'echo term {name} >> /out/log; T=1' TERM; echo ready {name} >> /out/log; "
        f'while :; do [ -n "$T" ] && echo alive {name} >> /out/log; sleep 0.1; done'
    )


@contextlib.contextmanager
def _stubborn_group(
    cli: Cli, tmp_path: Path, image: str, members: dict[str, int]
) -> Iterator[tuple[str, Path]]:
    """A group of stubborn tasks (name: stop timeout) sharing one log; down after."""
    name = f"cxd{secrets.token_hex(2)}"
    out = tmp_path / "out"
    out.mkdir()
    tasks = "".join(
        f'[[task]]\nname = "{task}"\nimage = "{image}"\n'
        f'command = ["sh", "-c", {json.dumps(_stubborn(task))}]\n'
        f'volumes = ["{out}:/out"]\nstop_timeout = {timeout}\n'
        for task, timeout in members.items()
    )
    file = tmp_path / "group.toml"
    file.write_text(f'name = "{name}"\nnetwork = "none"\n{tasks}')
    up = cli("group up", str(file))
    assert up.returncode == 0, up.stderr
    try:
        yield name, out / "log"
    finally:
        with contextlib.suppress(Exception):
            cli("group down", name)


@pytest.fixture
def group(cli: Cli, tmp_path: Path, test_image: str) -> Iterator[tuple[str, Path]]:
    with _stubborn_group(cli, tmp_path, test_image, {"t2": 2, "t4": 4}) as made:
        yield made


def test_group_down_stops_tasks_concurrently(cli: Cli, group: tuple[str, Path]) -> None:
    name, log = group
    wait_for(
        lambda: {"ready t2", "ready t4"} <= set(log.read_text().splitlines()),
        timeout=30,
        what="both tasks trap SIGTERM",
    )
    down = cli("group down", name)
    assert (down.returncode, down.stdout) == (0, f"{name}\n"), down.stderr
    lines = log.read_text().splitlines()
    for task, other in (("t2", "t4"), ("t4", "t2")):
        last_alive = max(i for i, line in enumerate(lines) if line == f"alive {task}")
        # the other task was asked to stop while this one still ran (it was not yet killed)
        assert lines.index(f"term {other}") < last_alive, lines


#: More members than teardown.MAX_THREADS (32): with one thread per whole stop, the 33rd
#: had its signal only once a stop of the first 32 was over (two stop timeouts).
MANY = 40


@pytest.fixture
def big_group(cli: Cli, tmp_path: Path, test_image: str) -> Iterator[tuple[str, Path]]:
    members = {f"m{i}": 5 for i in range(MANY)}
    with _stubborn_group(cli, tmp_path, test_image, members) as made:
        yield made


def test_group_down_of_more_members_than_threads_signals_all_before_any_kill(
    cli: Cli, big_group: tuple[str, Path]
) -> None:
    name, log = big_group
    members = [f"m{i}" for i in range(MANY)]
    wait_for(
        lambda: {f"ready {m}" for m in members} <= set(log.read_text().splitlines()),
        timeout=120,
        what=f"all {MANY} tasks trap SIGTERM",
    )
    down = cli("group down", name)
    assert (down.returncode, down.stdout) == (0, f"{name}\n"), down.stderr
    lines = log.read_text().splitlines()
    assert {f"term {m}" for m in members} <= set(lines), lines  # each had its signal
    first_killed = min(  # the line after which some member said nothing more
        max(i for i, line in enumerate(lines) if line == f"alive {m}") for m in members
    )
    last_signalled = max(lines.index(f"term {m}") for m in members)
    # every member was asked to stop while all of them still ran: none waited for a
    # stop of others to end before its signal, so down took one stop timeout
    assert last_signalled < first_killed, lines
    left = cli("ps", "-a", "-q")
    assert left.returncode == 0, left.stderr
    assert not [i for i in left.stdout.split() if i.startswith(f"{name}-")], left.stdout


def test_rm_force_of_several_kills_and_removes_each(cli: Cli, test_image: str) -> None:
    import subprocess
    import threading

    names = ["rmf-a", "rmf-b", "rmf-sentinel"]
    for n in names:
        assert cli("run", "-d", "--name", n, test_image, "sleep", "300").returncode == 0
    events = subprocess.Popen(cli.argv("events"), stdout=subprocess.PIPE, text=True)
    seen: list[dict[str, str]] = []
    reader = threading.Thread(
        target=lambda: seen.extend(json.loads(line) for line in events.stdout or ()), daemon=True
    )
    reader.start()
    try:

        def live() -> bool:  # the stream shows a pause from now on: it is subscribed
            cli("pause", "rmf-sentinel")
            cli("unpause", "rmf-sentinel")
            return any(e.get("type") == "pause" for e in list(seen))

        wait_for(live, timeout=30, what="ctrexec events to be live")
        out = cli("rm", "-f", "rmf-a", "rmf-b")
        assert (out.returncode, out.stdout) == (0, "rmf-a\nrmf-b\n"), out.stderr
        wait_for(
            lambda: sum(e.get("type") == "delete" for e in list(seen)) >= 2,
            timeout=30,
            what="both deletes",
        )
    finally:
        events.terminate()
        events.wait(timeout=30)
        reader.join(timeout=30)
        if events.stdout is not None:
            events.stdout.close()
        cli("rm", "-f", *names)
    # Both were killed and removed. That every kill was sent before the first removal
    # is the CLI's order, checked in tests/unit/test_cli_rm_order.py: here, a task's
    # exit event comes when its shim reaps it, which under load may follow the other
    # task's delete, so the stream's order proves nothing about the kills'.
    ours = {(e["type"], e["task"]) for e in seen if e.get("task") in ("rmf-a", "rmf-b")}
    assert {("exit", t) for t in ("rmf-a", "rmf-b")} <= ours, ours


def test_stop_of_several_signals_each_before_any_kill_and_removes_rm_ones(
    cli: Cli, tmp_path: Path, test_image: str
) -> None:
    """docker's ``stop A B C``: stopped together in one stop timeout, each word then
    reported in the order given; an unknown word is an error of its own; an ``--rm``
    container is gone after its stop, the others stay, stopped."""
    out = tmp_path / "out"
    out.mkdir()
    names = ["stp-a", "stp-b", "stp-rm"]
    try:
        for n in names:
            extra = ["--rm"] if n == "stp-rm" else []
            run = cli(
                "run", "-d", "--name", n, *extra, "-v", f"{out}:/out", test_image,
                "sh", "-c", _stubborn(n),
            )  # fmt: skip
            assert run.returncode == 0, run.stderr
        log = out / "log"
        wait_for(
            lambda: {f"ready {n}" for n in names} <= set(log.read_text().splitlines()),
            timeout=60,
            what="the tasks trap SIGTERM",
        )
        stop = cli("stop", "-t", "3", "stp-a", "stp-none", "stp-b", "stp-rm")
        assert stop.returncode == 1, stop.stderr
        assert stop.stdout == "stp-a\nstp-b\nstp-rm\n", stop.stderr
        assert "No such container: stp-none" in stop.stderr, stop.stderr
        lines = log.read_text().splitlines()
        first_killed = min(
            max(i for i, line in enumerate(lines) if line == f"alive {n}") for n in names
        )
        assert max(lines.index(f"term {n}") for n in names) < first_killed, lines
        left = cli("ps", "-a", "--format", "{{.Names}} {{.Status}}")
        assert left.returncode == 0, left.stderr
        rows = dict(line.split(" ", 1) for line in left.stdout.splitlines())
        assert "stp-rm" not in rows, rows
        for n in ("stp-a", "stp-b"):
            assert rows[n].startswith("Exited (137)"), rows
    finally:
        cli("rm", "-f", *names)
