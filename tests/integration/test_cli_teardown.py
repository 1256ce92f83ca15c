"""``group down`` stops its tasks together: every task has had its stop signal before
the first one is killed. Checked by order, in one file both tasks append to, not by
how long the command took."""

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


@pytest.fixture
def group(cli: Cli, tmp_path: Path, test_image: str) -> Iterator[tuple[str, Path]]:
    name = f"cxd{secrets.token_hex(2)}"
    out = tmp_path / "out"
    out.mkdir()
    tasks = "".join(
        f'[[task]]\nname = "t{timeout}"\nimage = "{test_image}"\n'
        f'command = ["sh", "-c", {json.dumps(_stubborn(f"t{timeout}"))}]\n'
        f'volumes = ["{out}:/out"]\nstop_timeout = {timeout}\n'
        for timeout in (2, 4)
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
