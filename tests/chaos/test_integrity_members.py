"""Issue 20, scenarios 7 and 8: a member deleted outside ctrexec, and containerd
stopped in the middle of ``group up``.

7. With ``ctrexec supervise`` running, a member is deleted with ``ctr`` (task killed and
   deleted, container removed). The supervisor says so in one line and removes the
   member's log and host-files directories; ``group ps`` shows it "missing"; ``group
   up`` makes it again, in the group's one namespace with its one address.
8. containerd is SIGKILLed while ``group up`` creates the members (on a private
   containerd). ``group up`` fails with one line and exit 125; once containerd is back,
   ``group up`` again converges, and ``group down`` leaves nothing.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from _chaoslib import IMAGE, ChaosDaemon, cgroup_dirs, netns_id, shims, strays, wait_for
from _cli import CLI_PROG, cli_argv
from _integrity import Bridged

from ctrexec.containerd import containers, tasks
from ctrexec.containerd.tasks import Status
from ctrexec.errors import NotFound
from ctrexec.groups import missing
from ctrexec.net import hostfiles
from ctrexec.tasks import files as taskfiles
from ctrexec.testing import audit


def _ctr(g: Bridged, *args: str) -> subprocess.CompletedProcess[str]:
    argv = ["ctr", "-a", g.address, "-n", g.namespace, *args]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)


def _gone(g: Bridged, container_id: str) -> bool:
    try:
        containers.get(g.client, container_id)
    except NotFound:
        return True
    return False


def _delete_out_of_band(g: Bridged, container_id: str) -> None:
    """What an operator with ``ctr`` does: kill and delete the task, remove the
    container (and its snapshot). A supervisor may restart a killed task before the
    removal: then it is done again, until the container is gone."""

    def removed() -> bool:
        _ctr(g, "task", "delete", "--force", container_id)
        _ctr(g, "container", "rm", container_id)
        return _gone(g, container_id)

    wait_for(removed, f"ctr to remove {container_id}", timeout=60, interval=0.2)


@pytest.fixture
def supervisor(bridged: Bridged) -> Iterator[Path]:
    """``ctrexec supervise`` on the session's namespace, as a process of the test's own;
    yields the file its log goes to. Stopped by its pid (SIGTERM) after the test."""
    log = bridged.tmp / "supervise.log"
    with log.open("w") as out:
        proc = subprocess.Popen(bridged.cli("supervise"), env=bridged.env, stdout=out, stderr=out)
    try:
        yield log
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def _member_dirs(g: Bridged, container_id: str) -> list[Path]:
    log_dir = taskfiles.log_path(g.logs, g.namespace, container_id).parent
    files = hostfiles.task_dir(hostfiles.DEFAULT_DIR, g.namespace, container_id).directory
    return [log_dir, files]


@pytest.mark.parametrize("task", ["cli", "srv"])
def test_a_member_deleted_outside_ctrexec_is_reported_cleaned_and_made_again(
    bridged: Bridged, supervisor: Path, task: str
) -> None:
    """``cli`` has no restart policy; ``srv`` (restart always) has a restart pending
    when its container goes, which used to end in silence."""
    g = bridged
    g.up()
    g.wait_sound()
    member = g.member(task)
    dirs = _member_dirs(g, member)
    assert all(d.exists() for d in dirs), dirs
    live = f"watching namespace {g.namespace}"
    wait_for(lambda: live in supervisor.read_text(), "the supervisor's stream", timeout=60)
    _delete_out_of_band(g, member)
    line = missing.report(g.name, member)
    wait_for(lambda: line in supervisor.read_text(), "the supervisor's report", timeout=60)
    assert supervisor.read_text().count(line) == 1
    assert [d for d in dirs if d.exists()] == []
    ps = g.run("group ps", g.name)
    assert ps.returncode == 0, ps.stderr
    rows = [r.split() for r in ps.stdout.splitlines()]
    assert [member, "-", "missing", "-", "-"] in rows, ps.stdout
    assert line in ps.stderr
    g.up()
    g.wait_sound()
    ps = g.run("group ps", g.name)
    assert "missing" not in ps.stdout and ps.stderr == "", ps
    g.down_clean()
    # ctrexec's own removals (group down) are no deletion outside it.
    assert supervisor.read_text().count("deleted outside ctrexec") == 1


# -- 8: containerd stopped during group up ----------------------------------------------

SUBNET = "10.231.198.0/24"
SCRIPT = "while :; do sleep 0.1; done"
#: Runs the CLI, and SIGKILLs containerd (pid argv[1]) at the ``nth`` (argv[2])
#: Tasks.Create: before it is sent, or (argv[3] "shim") once containerd has started a
#: new shim (the create under way; a group's later members share the first's shim).
STOP_CONTAINERD_AT = """
import os, signal, sys, threading, time
from _chaoslib import hook, shims
import ctrexec.containerd.tasks as t
pid, nth, when = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
address, namespace, calls = sys.argv[sys.argv.index("--address") + 1], "", []
namespace = sys.argv[sys.argv.index("--namespace") + 1]
def at_shim(before):
    deadline = time.monotonic() + 30
    while set(shims(address, namespace)) <= before and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
def stop():
    calls.append(1)
    if len(calls) != nth:
        return
    if when == "shim":
        before = set(shims(address, namespace))
        threading.Thread(target=at_shim, args=(before,)).start()
    else:
        os.kill(pid, signal.SIGKILL)
hook(t, "create", "before", stop)
from ctrexec.cli.main import main
sys.exit(main(sys.argv[4:]))
"""


@attrs.frozen
class PrivateGroup:
    """A bridged two-task group on the private containerd, through the CLI."""

    daemon: ChaosDaemon
    name: str
    file: Path
    bridge: str
    tmp: Path
    env: dict[str, str]

    @property
    def logs(self) -> Path:
        return self.tmp / "logs"

    def argv(self, command: str, *args: str, prog: tuple[str, ...] = CLI_PROG) -> list[str]:
        ns, address = self.daemon.namespace, self.daemon.address
        return cli_argv(command, address, *args, namespace=ns, log_dir=self.logs, prog=prog)

    def run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=180, check=False
        )

    def leftovers(self) -> list[str]:
        client = self.daemon.client()
        ns, address = self.daemon.namespace, self.daemon.address
        found = {
            "containerd": audit(client),
            "netns": [self.name] if os.path.lexists(f"/run/netns/cx-{self.name}") else [],
            "IPAM": sorted(p.name for p in (self.tmp / "ipam").rglob("10.*")),
            "CNI results": sorted(p.name for p in (self.tmp / "cni-cache").rglob("*.json")),
            "host files": sorted(hostfiles.DEFAULT_DIR.glob(f"{ns}+{self.name}*")),
            "logs": sorted(self.logs.rglob("*")) if self.logs.exists() else [],
            "processes": strays(address, ns, self.name, self.logs),
            "shims": shims(address, ns),
            "cgroups": cgroup_dirs(ns, self.name),
        }
        return [f"{what}: {left}" for what, left in found.items() if left]


@pytest.fixture
def private_group(chaos_daemon: ChaosDaemon, tmp_path: Path) -> Iterator[PrivateGroup]:
    tag = secrets.token_hex(2)
    name, bridge = f"chaos-m{tag}", f"cxm{tag}"
    env = dict(
        os.environ,
        CTREXEC_NETWORK=bridge,
        CTREXEC_BRIDGE=bridge,
        CTREXEC_SUBNET=SUBNET,
        CTREXEC_CNI_CACHE_DIR=str(tmp_path / "cni-cache"),
        CTREXEC_IPAM_DIR=str(tmp_path / "ipam"),
        PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), *sys.path]),
    )
    task = (
        '[[task]]\nname = "{}"\nimage = "' + IMAGE + '"\n'
        f'command = ["sh", "-c", {json.dumps(SCRIPT)}]\nstop_signal = "SIGKILL"\n'
    )
    file = tmp_path / "group.toml"
    file.write_text(f'name = "{name}"\nnetwork = "bridge"\n' + task.format("a") + task.format("b"))
    forward = Path("/proc/sys/net/ipv4/ip_forward").read_text()
    g = PrivateGroup(chaos_daemon, name, file, bridge, tmp_path, env)
    try:
        yield g
    finally:
        if not chaos_daemon.current.is_running():
            chaos_daemon.restart()
        g.run(g.argv("group down", name))
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)
        Path("/proc/sys/net/ipv4/ip_forward").write_text(forward)
        for d in hostfiles.DEFAULT_DIR.glob(f"{chaos_daemon.namespace}+{name}*"):
            hostfiles.remove_dir(d)


def _sound(g: PrivateGroup) -> list[str]:
    """What is wrong: every member running, in the pin's namespace, with one address."""
    client = g.daemon.client()
    pids = []
    for task in ("a", "b"):
        state = tasks.find(client, f"{g.name}-{task}")
        if state is None or state.status is not Status.RUNNING or not state.pid:
            return [f"{task} is not running: {state}"]
        pids.append(state.pid)
    spaces = {netns_id(f"/proc/{p}/ns/net") for p in pids} | {netns_id(f"/run/netns/cx-{g.name}")}
    addresses = sorted(p.name for p in (g.tmp / "ipam").rglob("10.*"))
    eth0 = subprocess.run(
        ["nsenter", "-t", str(pids[0]), "-n", "ip", "-4", "-o", "addr", "show", "dev", "eth0"],
        capture_output=True, text=True, check=False,
    ).stdout.splitlines()  # fmt: skip
    found = [f"namespaces: {spaces}"] if len(spaces) != 1 else []
    if len(addresses) != 1 or len(eth0) != 1:
        found.append(f"addresses: IPAM {addresses}, eth0 {eth0}")
    return found


@pytest.mark.parametrize(("nth", "when"), [(1, "before"), (2, "before"), (1, "shim")])
def test_group_up_with_containerd_stopped_in_it_fails_in_one_line_and_a_rerun_converges(
    private_group: PrivateGroup, nth: int, when: str
) -> None:
    """containerd dies before the first member's Tasks.Create, before the second's (the
    first one running), or while containerd works on the first's (its shim, which the
    group's members share, started: the create under way)."""
    g = private_group
    stop = (sys.executable, "-c", STOP_CONTAINERD_AT, str(g.daemon.pid()), str(nth), when)
    failed = g.run(g.argv("group up", str(g.file), prog=stop))
    wait_for(lambda: not g.daemon.current.is_running(), "containerd to be gone", timeout=30)
    assert failed.returncode == 125, failed
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1, failed.stderr
    assert lines[0].startswith(
        f"ctrexec: group {g.name}: containerd at {g.daemon.address} went away"
    )
    assert lines[0].endswith("run `ctrexec group up FILE` again once it is back"), lines[0]
    g.daemon.restart()
    up = g.run(g.argv("group up", str(g.file)))
    assert up.returncode == 0, up.stderr
    try:
        wait_for(lambda: not _sound(g), "the group to be one and running", timeout=60)
    except AssertionError:
        assert _sound(g) == []
    down = g.run(g.argv("group down", g.name))
    assert down.returncode == 0, down.stderr
    prune = subprocess.run(
        [*CLI_PROG, "network", "prune"], env=g.env, capture_output=True, text=True, check=False
    )
    assert prune.returncode == 0, prune.stderr
    try:
        wait_for(lambda: not g.leftovers(), "group down to leave nothing", timeout=30)
    except AssertionError:
        assert g.leftovers() == []
    assert not Path(f"/sys/class/net/{g.bridge}").exists()


def test_without_a_supervisor_group_up_and_group_down_remove_a_deleted_members_files(
    bridged: Bridged,
) -> None:
    """No supervisor to see the record go: ``group ps`` still says "missing", ``group
    up`` makes the member again without its old files, and ``group down`` removes the
    files of a member deleted since."""
    g = bridged
    g.up()
    g.wait_sound()
    cli = g.member("cli")
    marker = _member_dirs(g, cli)[0] / "left-by-the-old-member"
    marker.write_text("old")
    _delete_out_of_band(g, cli)
    ps = g.run("group ps", g.name)
    assert [cli, "-", "missing", "-", "-"] in [r.split() for r in ps.stdout.splitlines()], ps
    assert all(d.exists() for d in _member_dirs(g, cli))  # nobody removed them yet
    g.up()
    g.wait_sound()
    assert not marker.exists()
    srv = g.member("srv")
    _delete_out_of_band(g, srv)
    assert all(d.exists() for d in _member_dirs(g, srv))
    g.down_clean()  # its log and host files too (leftovers() looks at both)
