"""Two operators at once on one group: their acts serialise (ctrexec.tasks.grouplock).

Two ``group up`` of one file started together used to race: each made the namespace,
wired it and created the members, and both could fail (``network namespace ... does
not exist``, ``container name ... is already in use``) with no group up. Now the second
waits for the first and finds the group up. Everything runs through the real CLI, in
subprocesses, and is checked from the kernel: the members' and the pin's namespace
inodes, the IPAM reservations, the eth0 addresses.
"""

from __future__ import annotations

import subprocess

from _integrity import Bridged

#: Rounds of two operators at once (the issue saw 4 failures in 18).
ROUNDS = 20


def _together(g: Bridged, *commands: tuple[str, str]) -> list[subprocess.CompletedProcess[str]]:
    """Start the CLI commands at once; each one's outcome once all have ended."""
    children = [
        subprocess.Popen(
            g.cli(verb, arg), env=g.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for verb, arg in commands
    ]
    out = []
    for child, (verb, arg) in zip(children, commands, strict=True):
        stdout, stderr = child.communicate(timeout=300)
        out.append(subprocess.CompletedProcess([verb, arg], child.returncode, stdout, stderr))
    return out


def _one_group(g: Bridged) -> list[str]:
    """What is wrong with the group as one group up left it (kernel facts, no arping)."""
    pids = g.member_pids()
    if sorted(pids) != ["cli", "srv"]:
        return [f"running members: {sorted(pids)}"]
    spaces = g.namespaces()
    if "pin" not in spaces or len(set(spaces.values())) != 1:
        return [f"namespaces: {spaces}"]
    held = sorted(p.name for p in g.ipam.rglob("10.*"))
    ips, _ = g.eth0(pids["srv"])
    if len(held) != 1 or ips != held:
        return [f"IPAM holds {held}, eth0 has {ips}"]
    return []


def test_two_group_ups_at_once_bring_up_one_group_every_time(bridged: Bridged) -> None:
    g = bridged
    failures = []
    for n in range(ROUNDS):
        done = _together(g, ("group up", str(g.file)), ("group up", str(g.file)))
        problems = [f"exit {d.returncode}: {d.stderr.strip()}" for d in done if d.returncode]
        problems += _one_group(g)
        if problems:
            failures.append(f"round {n}: {problems}")
        down = g.run("group down", g.name)
        assert down.returncode == 0, down.stderr
    assert failures == [], f"{len(failures)} of {ROUNDS} rounds failed:\n" + "\n".join(failures)
    g.up()
    g.wait_sound()
    g.down_clean()


def test_group_up_and_down_at_once_end_in_one_of_the_two_states(bridged: Bridged) -> None:
    """Whichever goes first, the other acts on what it left: the group is either up
    as one group or gone without a trace, never half of each."""
    g = bridged
    failures = []
    for n in range(8):
        if n % 2:
            g.up()  # from up: the up has nothing to do, the down takes it all
        done = _together(g, ("group up", str(g.file)), ("group down", g.name))
        up, down = done
        if up.returncode:
            failures.append(f"round {n}: group up exit {up.returncode}: {up.stderr.strip()}")
            continue
        if down.returncode and "does not exist" not in down.stderr:
            failures.append(f"round {n}: group down exit {down.returncode}: {down.stderr.strip()}")
            continue
        if g.member_pids():  # up after the down: one sound group
            found = _one_group(g)
        else:  # down after the up: nothing left but the shared bridge
            found = [f for f in g.leftovers() if not f.startswith(("bridge:", "logs:"))]
        if found:
            failures.append(f"round {n}: {found}")
        g.run("group down", g.name)
    assert failures == [], "\n".join(failures)
    g.up()
    g.down_clean()
