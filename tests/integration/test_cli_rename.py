"""``ctrexec rename`` through the real binary: the record, its exit, its logs and its
snapshot move to the new name; a live task, a taken name and owned ids are refused."""

from __future__ import annotations

import contextlib
import json
import secrets
from pathlib import Path

import pytest
from _cli import Cli

from ctrexec import errors
from ctrexec import labels as lbl
from ctrexec.containerd import containers, snapshots
from ctrexec.containerd.client import Client
from ctrexec.groups.spec import parse_group
from ctrexec.groups.updown import Groups
from ctrexec.net.networks import Networks
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor

pytestmark = pytest.mark.integration


def _inspect(cli: Cli, name: str) -> dict[str, object]:
    out = cli("inspect", name)
    assert out.returncode == 0, out.stderr
    info: dict[str, object] = json.loads(out.stdout)[0]["Ctrexec"]  # ctrexec's own view
    return info


def _status(cli: Cli, name: str) -> str:
    out = cli("ps", "-a", "--filter", f"name={name}", "--format", "{{.Names}} {{.Status}}")
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_rename_an_exited_container(
    client: Client, cli: Cli, test_image: str, made: list[str]
) -> None:
    made += ["rn-old", "rn-new"]
    run = cli("run", "--name", "rn-old", test_image, "sh", "-c", "echo hi; exit 3")
    assert run.returncode == 3, run.stderr
    key = containers.get(client, "rn-old").snapshot_key
    out = cli("rename", "rn-old", "rn-new")
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")
    gone = cli("inspect", "rn-old")
    assert (gone.returncode, gone.stderr) == (1, "ctrexec: No such container: rn-old\n")
    assert _status(cli, "rn-new").startswith("rn-new Exited (3)")
    kept = _inspect(cli, "rn-new")
    assert (kept["status"], kept["exit_code"]) == ("stopped", 3), kept
    assert _status(cli, "rn-old") == ""
    record = containers.get(client, "rn-new")
    assert record.snapshot_key == key  # the same rootfs, held throughout
    assert record.extension_json(lbl.CONFIG_EXTENSION)["name"] == "rn-new"
    assert "/rn-new/" in record.labels[lbl.LOG_PATH]
    assert cli("logs", "rn-new").stdout == "hi\n"
    assert cli("wait", "rn-new").stdout == "3\n"
    start = cli("start", "rn-new")
    assert start.returncode == 0, start.stderr
    assert cli("wait", "rn-new").stdout == "3\n"
    assert cli("logs", "rn-new").stdout == "hi\nhi\n"
    info = _inspect(cli, "rn-new")
    assert (info["run"], info["status"]) == (2, "stopped")


def test_rename_a_created_container(cli: Cli, test_image: str, made: list[str]) -> None:
    made += ["rn-made", "rn-moved"]
    out = cli("create", "--name", "rn-made", test_image, "echo", "moved")
    assert out.returncode == 0, out.stderr
    out = cli("rename", "rn-made", "rn-moved")
    assert out.returncode == 0, out.stderr
    assert _status(cli, "rn-moved") == "rn-moved Created"
    assert cli("start", "rn-moved").returncode == 0
    assert cli("wait", "rn-moved").stdout == "0\n"
    assert cli("logs", "rn-moved").stdout == "moved\n"


def test_rename_refusals(cli: Cli, test_image: str, made: list[str]) -> None:
    made += ["rn-web", "rn-taken"]
    assert cli("run", "-d", "--name", "rn-web", test_image, "sleep", "300").returncode == 0
    assert cli("create", "--name", "rn-taken", test_image, "true").returncode == 0
    cases = {
        ("rn-web", "rn-other"): (
            125,
            "cannot rename running container rn-web: containerd keys a task by its "
            "container's id; stop it first",
        ),
        ("rn-taken", "rn-web"): (125, "container name 'rn-web' is already in use"),
        ("rn-nosuch", "rn-x"): (1, "No such container: rn-nosuch"),
        ("rn-taken", "bad/name"): (
            125,
            "invalid container name 'bad/name': use letters and digits, separated by "
            "single '.', '_' or '-'",
        ),
    }
    for argv, (code, message) in cases.items():
        out = cli("rename", *argv)
        assert (out.returncode, out.stderr) == (code, f"ctrexec: {message}\n"), argv
    assert _inspect(cli, "rn-web")["status"] == "running"
    assert _status(cli, "rn-taken") == "rn-taken Created"
    assert cli("inspect", "rn-other").returncode == 1


def test_rename_refuses_owned_ids(
    client: Client, cli: Cli, test_image: str, tmp_path: Path
) -> None:
    tag = secrets.token_hex(2)
    nets = Networks(
        network=f"cxrn{tag}",
        bridge=f"cxrn{tag}",
        subnet="10.231.187.0/24",
        cache_dir=tmp_path / "cni-cache",
        ipam_dir=tmp_path / "ipam",
    )
    ex = Executor(client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
    groups = Groups(ex, nets)
    group = f"cxrn{tag}"
    nomad = f"rn-nomad-{tag}"
    try:
        task = {"name": "web", "image": test_image, "command": ["sleep", "300"]}
        groups.up(parse_group({"name": group, "network": "none", "task": [task]}))
        out = cli("rename", f"{group}-web", "rn-x")
        assert out.returncode == 125
        assert out.stderr.startswith(
            f"ctrexec: cannot rename container {group}-web: it is a member of group {group}"
        )
        config = TaskConfig(name=nomad, image=test_image, command=("true",))
        ex.create(config, owner_labels={lbl.NOMAD_TASK_ID: "alloc/web/1"})
        out = cli("rename", nomad, "rn-y")
        assert out.returncode == 125
        assert out.stderr.startswith(f"ctrexec: cannot rename container {nomad}: it belongs")
        assert cli("inspect", nomad).returncode == 0
        assert cli("inspect", f"{group}-web").returncode == 0
    finally:
        for name in groups.names():
            groups.down(name, timeout=1)
        with contextlib.suppress(Exception):
            ex.destroy(nomad, force=True)
        nets.remove_bridge()


def test_a_failed_move_leaves_the_old_container_whole(
    client: Client, test_image: str, tmp_path: Path
) -> None:
    """The logs cannot move (the new name's log directory is taken): the copy made under
    the new name goes again, and the old container, exit and logs included, stays."""
    from _support import scratch_executor

    with scratch_executor(client, tmp_path, "rn-lib") as ex:
        ex.start_task(TaskConfig(name="rn-lib-a", image=test_image, command=("echo", "kept")))
        assert ex.wait("rn-lib-a").exit_code == 0
        log_path = Path(ex.inspect("rn-lib-a").log_path)
        taken = log_path.parent.parent / "rn-lib-b"
        taken.mkdir()
        (taken / "left-behind").write_text("")
        with pytest.raises(errors.FailedPrecondition, match="cannot move the logs"):
            ex.rename("rn-lib-a", "rn-lib-b")
        with pytest.raises(errors.NotFound):
            ex.inspect("rn-lib-b")
        info = ex.inspect("rn-lib-a")
        assert info.exit is not None and info.exit.exit_code == 0
        assert log_path.read_text().count("kept") == 1
        record = containers.get(client, "rn-lib-a")
        assert snapshots.stat_snapshot(client, record.snapshot_key, record.snapshotter)
        ex.start("rn-lib-a")
        assert ex.wait("rn-lib-a").exit_code == 0
