"""docker's run semantics through the real binary, containerd and runc.

Capabilities (drop, then add), user and group resolution from the image's
/etc/passwd and /etc/group (on run and on exec), and --entrypoint overrides.
The test image has users root, app (1000, also in staff 50) and nobody, and
groups root, staff, app and nogroup (scripts/build-test-image).
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import Cli

from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.errors import CtrexecError
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor
from ctrexec.testing import audit

pytestmark = pytest.mark.integration


@pytest.fixture
def cli(containerd_address: str, client: Client, tmp_path: Path) -> Iterator[RunCli]:
    runner = RunCli(containerd_address, log_dir=tmp_path / "logs")
    yield runner
    ex = Executor(client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
    for name in runner.names:
        with contextlib.suppress(CtrexecError):
            ex.destroy(name, force=True)


class RunCli(Cli):
    """The CLI on the session containerd, remembering the names it ran to clean them up."""

    def __init__(self, address: str, log_dir: Path) -> None:
        super().__init__(address, log_dir)
        self.names: list[str] = []

    def run(self, name: str, *argv: str) -> subprocess.CompletedProcess[str]:
        self.names.append(name)
        return self("run", "--rm", "--name", name, *argv)


def _id_fields(text: str) -> tuple[str, str, set[str]]:
    """``uid=1000(app) gid=1000(app) groups=50(staff)`` -> (uid, gid, groups)."""
    fields = dict(part.split("=", 1) for part in text.split())
    groups = set(fields["groups"].split(",")) if fields.get("groups") else set()
    return fields["uid"], fields["gid"], groups


def test_cap_drop_all_then_add_one(cli: RunCli, test_image: str) -> None:
    out = cli.run(
        "sem-caps", "--cap-drop", "ALL", "--cap-add", "NET_BIND_SERVICE",
        test_image, "grep", "^Cap", "/proc/self/status",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    caps = dict(re.findall(r"^(Cap\w+):\s+([0-9a-f]+)$", out.stdout, re.MULTILINE))
    assert caps["CapEff"] == "0000000000000400", out.stdout
    assert caps["CapPrm"] == "0000000000000400"
    assert caps["CapBnd"] == "0000000000000400"


# -u value -> (uid, gid, groups that must be there, groups that must not be there)
USERS = {
    "1000": ("1000(app)", "1000(app)", {"50(staff)"}, set()),
    "app": ("1000(app)", "1000(app)", {"50(staff)"}, set()),
    "1000:0": ("1000(app)", "0(root)", set(), {"50(staff)"}),
    "app:nogroup": ("1000(app)", "65534(nogroup)", set(), {"50(staff)"}),
    "app:staff": ("1000(app)", "50(staff)", set(), {"1000(app)"}),
    "65534": ("65534(nobody)", "65534(nogroup)", set(), {"50(staff)"}),
    "4321": ("4321", "0(root)", set(), {"50(staff)"}),
}


def _check_id(user: str, out: subprocess.CompletedProcess[str]) -> None:
    assert out.returncode == 0, out.stderr
    uid, gid, groups = _id_fields(out.stdout)
    want_uid, want_gid, present, absent = USERS[user]
    assert (uid, gid) == (want_uid, want_gid), out.stdout
    assert present <= groups and not absent & groups, out.stdout


@pytest.mark.parametrize("user", sorted(USERS))
def test_run_user_takes_groups_from_image(cli: RunCli, test_image: str, user: str) -> None:
    name = "sem-run-u" + re.sub(r"\W", "-", user)
    _check_id(user, cli.run(name, "-u", user, test_image, "id"))


def _wait_running(ex: Executor, name: str) -> None:
    deadline = time.monotonic() + 30
    while ex.inspect(name).status is not Status.RUNNING:
        assert time.monotonic() < deadline, f"{name} did not start"
        time.sleep(0.05)


def test_exec_user_takes_groups_from_image(
    cli: RunCli, client: Client, test_image: str, tmp_path: Path
) -> None:
    ex = Executor(client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
    cli.names.append("sem-exec-u")
    ex.start_task(TaskConfig(name="sem-exec-u", image=test_image, command=["sleep", "1000"]))
    _wait_running(ex, "sem-exec-u")
    for user in sorted(USERS):
        _check_id(user, cli("exec", "-u", user, "sem-exec-u", "id"))


def test_empty_entrypoint_runs_the_command(cli: RunCli, test_image: str) -> None:
    out = cli.run("sem-ep-empty", "--entrypoint", "", test_image, "echo", "hi")
    assert (out.returncode, out.stdout) == (0, "hi\n"), out.stderr


def test_entrypoint_replaces_image_cmd(cli: RunCli, test_image: str) -> None:
    # The image's Cmd is ["sh"]: a given entrypoint clears it, so echo prints an empty line.
    out = cli.run("sem-ep-echo", "--entrypoint", "echo", test_image)
    assert (out.returncode, out.stdout) == (0, "\n"), out.stderr
    out = cli.run("sem-ep-echo2", "--entrypoint", "echo", test_image, "a", "b")
    assert (out.returncode, out.stdout) == (0, "a b\n"), out.stderr


def test_empty_entrypoint_without_command_is_refused(
    cli: RunCli, client: Client, test_image: str
) -> None:
    before = sorted(audit(client))
    out = cli.run("sem-ep-none", "--entrypoint", "", test_image)
    assert out.returncode == 125
    assert out.stderr.strip().splitlines() == ["ctrexec: no command specified"]
    assert sorted(audit(client)) == before
