"""The prunes' ``[y/N]`` and ``stats``' redraw, as a user at a terminal meets them,
through the real binary on a real pseudo-terminal (issue 37, item 8).

A prune without ``-f`` asks on a terminal; a script without one (stdin not a tty) and
``-f`` go ahead without asking. ``stats`` clears the screen before each table on a
terminal and scrolls, with no escape codes, into a pipe. Waits are bounded polls of
the screen or of containerd's state, never fixed sleeps.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
from collections.abc import Iterator

import pytest
from _cli import Cli
from _pty import PtyCli
from _support import until

pytestmark = pytest.mark.integration

PREFIX = "prompt-"
LABEL = "ctrexec-test-prompt=1"
QUESTION = b"Are you sure you want to continue? [y/N] "
CLEAR = b"\x1b[2J\x1b[H"


@pytest.fixture
def ptys(cli: Cli) -> Iterator[list[PtyCli]]:
    """PtyClis the test opens; closed, and the test's containers and volumes removed."""
    opened: list[PtyCli] = []
    yield opened
    for p in opened:
        p.close()
    names = [n for n in cli("ps", "-aq").stdout.split() if n.startswith(PREFIX)]
    if names:
        cli("rm", "-f", *names)
    vols = [v for v in cli("volume ls", "-q").stdout.split() if v.startswith(PREFIX)]
    if vols:
        cli("volume rm", "-f", *vols)


def _open(ptys: list[PtyCli], cli: Cli, command: str, *args: str) -> PtyCli:
    p = PtyCli(cli.argv(command, *args))
    ptys.append(p)
    return p


def _exists(cli: Cli, name: str) -> bool:
    out = cli("inspect", "--format", "{{.Name}}", name)
    assert out.returncode in (0, 1), out.stderr
    return out.returncode == 0


def _stopped(cli: Cli, test_image: str, name: str) -> None:
    out = cli("create", "--name", name, "--label", LABEL, test_image, "true")
    assert out.returncode == 0, out.stderr


def test_container_prune_asks_on_a_terminal(cli: Cli, test_image: str, ptys: list[PtyCli]) -> None:
    name = f"{PREFIX}stopped"
    _stopped(cli, test_image, name)
    p = _open(ptys, cli, "container prune", "--filter", f"label={LABEL}")
    p.expect(b"WARNING! This will remove all stopped containers.")
    p.expect(QUESTION)
    p.write(b"n\n")
    assert p.wait() == 0
    assert b"Deleted Containers" not in p.screen
    assert _exists(cli, name)  # "n": nothing removed
    p = _open(ptys, cli, "container prune", "--filter", f"label={LABEL}")
    p.expect(QUESTION)
    p.write(b"y\n")
    p.expect(b"Deleted Containers:")
    assert p.wait() == 0
    assert not _exists(cli, name)


def test_container_prune_without_a_terminal_or_with_f_does_not_ask(
    cli: Cli, test_image: str, ptys: list[PtyCli]
) -> None:
    name = f"{PREFIX}script"
    _stopped(cli, test_image, name)
    out = cli("container prune", "--filter", f"label={LABEL}")  # stdin: not a terminal
    assert out.returncode == 0, out.stderr
    assert "[y/N]" not in out.stdout and name in out.stdout
    assert not _exists(cli, name)
    _stopped(cli, test_image, name)
    p = _open(ptys, cli, "container prune", "-f", "--filter", f"label={LABEL}")
    p.expect(b"Deleted Containers:")
    assert p.wait() == 0
    assert b"[y/N]" not in p.screen
    assert not _exists(cli, name)


def test_image_and_system_prune_ask_on_a_terminal(
    cli: Cli, test_image: str, ptys: list[PtyCli]
) -> None:
    p = _open(ptys, cli, "image prune")
    p.expect(b"WARNING! This will remove all dangling images.")
    p.expect(QUESTION)
    p.write(b"N\n")
    assert p.wait() == 0
    assert b"Total reclaimed space" not in p.screen  # it never pruned
    name = f"{PREFIX}system"
    _stopped(cli, test_image, name)
    p = _open(ptys, cli, "system prune")
    p.expect(b"WARNING! This will remove:")
    p.expect(b"  - all stopped containers")
    p.expect(QUESTION)
    p.write(b"\n")  # the default is No
    assert p.wait() == 0
    assert b"Total reclaimed space" not in p.screen
    assert _exists(cli, name)


def test_volume_prune_asks_only_on_a_terminal(cli: Cli, ptys: list[PtyCli]) -> None:
    def volumes() -> list[str]:
        return cli("volume ls", "-q").stdout.split()

    name = f"{PREFIX}vol"
    assert cli("volume create", name).returncode == 0
    p = _open(ptys, cli, "volume prune", "-a")
    p.expect(QUESTION)
    p.write(b"no\n")
    assert p.wait() == 0
    assert name in volumes()
    out = cli("volume prune", "-a")  # a script: no terminal, so it goes ahead
    assert out.returncode == 0, out.stderr
    assert "[y/N]" not in out.stdout and f"Deleted Volumes:\n{name}\n" in out.stdout
    assert name not in volumes()


def _running(cli: Cli, test_image: str, name: str) -> None:
    out = cli("run", "-d", "--name", name, test_image, "sleep", "600")
    assert out.returncode == 0, out.stderr


def test_stats_redraws_on_a_terminal_and_scrolls_into_a_pipe(
    cli: Cli, test_image: str, ptys: list[PtyCli]
) -> None:
    name = f"{PREFIX}stats-a-name-longer-than-12"
    _running(cli, test_image, name)
    p = _open(ptys, cli, "stats", name)
    p.expect(CLEAR)
    p.expect(name.encode())
    p.expect(CLEAR)  # the second table, in place of the first
    p.expect(name.encode())
    piped = subprocess.Popen(cli.argv("stats", name), stdout=subprocess.PIPE)
    assert piped.stdout is not None
    text = b""
    try:

        def two_tables() -> bool:
            nonlocal text
            if select.select([piped.stdout], [], [], 0.1)[0]:
                text += os.read(piped.stdout.fileno(), 65536)  # type: ignore[union-attr]
            return text.count(name.encode()) >= 2

        until(two_tables, f"two tables through the pipe (so far {text!r})")
    finally:
        piped.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            piped.wait(30)
        piped.stdout.close()
    assert b"\x1b" not in text
    assert text.count(b"NAME") >= 2 and b"\n\n" in text  # one table after another


def test_stats_id_is_the_whole_name(cli: Cli, test_image: str, ptys: list[PtyCli]) -> None:
    name = f"{PREFIX}stats-id-longer-than-12"
    _running(cli, test_image, name)
    out = cli("stats", "--no-stream", "--format", "{{.ID}}", name)
    assert (out.returncode, out.stdout) == (0, f"{name}\n"), out.stderr
    ps = cli("ps", "--format", "{{.ID}}", "--filter", f"name={name}")
    assert ps.stdout == out.stdout  # the same id as ps prints
