"""Several names per verb, and errors in the user's words, through the real binary.

docker acts on every name given, prints each failure on its own line and exits 1 at
the end; its refusals name the container and its state, never an RPC or runc's
``: unknown``.
"""

from __future__ import annotations

import re

import pytest
from _cli import Cli

pytestmark = pytest.mark.integration

#: What must never reach a user: a containerd method name, runc's unclassified suffix.
INTERNAL = re.compile(r"\b[A-Z][a-z]+s\.[A-Z][a-zA-Z]+:|: unknown\b")


def _sleeper(cli: Cli, image: str, made: list[str], name: str) -> None:
    made.append(name)
    out = cli("run", "-d", "--name", name, image, "sleep", "300")
    assert out.returncode == 0, out.stderr


def _exited(cli: Cli, image: str, made: list[str], name: str) -> None:
    made.append(name)
    out = cli("run", "--name", name, image, "true")
    assert out.returncode == 0, out.stderr


def _lines(text: str) -> list[str]:
    return text.strip().splitlines()


def test_rm_acts_on_every_name_and_reports_each_failure(
    cli: Cli, test_image: str, made: list[str]
) -> None:
    _exited(cli, test_image, made, "vb-rm-a")
    _exited(cli, test_image, made, "vb-rm-b")
    out = cli("rm", "vb-rm-a", "vb-rm-nosuch", "vb-rm-gone", "vb-rm-b")
    assert out.returncode == 1
    assert _lines(out.stdout) == ["vb-rm-a", "vb-rm-b"]
    assert _lines(out.stderr) == [
        "ctrexec: No such container: vb-rm-nosuch",
        "ctrexec: No such container: vb-rm-gone",
    ]
    assert cli("inspect", "vb-rm-b").returncode != 0


@pytest.mark.parametrize("verb", ["stop", "kill", "start", "pause", "unpause"])
def test_verbs_act_on_every_name(cli: Cli, test_image: str, made: list[str], verb: str) -> None:
    a, b = f"vb-{verb}-a", f"vb-{verb}-b"
    _sleeper(cli, test_image, made, a)
    _sleeper(cli, test_image, made, b)
    if verb == "unpause":
        assert cli("pause", a, b).returncode == 0
    if verb == "start":
        assert cli("stop", "-t", "0", a, b).returncode == 0
    out = cli(verb, a, "vb-nosuch", b)
    assert out.returncode == 1, out
    assert _lines(out.stdout) == [a, b]
    assert _lines(out.stderr) == ["ctrexec: No such container: vb-nosuch"]
    want = {"stop": "stopped", "kill": "stopped", "start": "running"}.get(verb)
    want = want or ("paused" if verb == "pause" else "running")
    for name in (a, b):
        _wait_status(cli, name, want)


def _wait_status(cli: Cli, name: str, want: str) -> None:
    import json

    from ctrexec.testing import wait_for

    def status() -> bool:
        out = cli("inspect", name)
        return out.returncode == 0 and json.loads(out.stdout)[0]["Ctrexec"]["status"] == want

    wait_for(status, timeout=30, what=f"{name} {want}")


def test_refusals_in_the_users_words(cli: Cli, test_image: str, made: list[str]) -> None:
    _sleeper(cli, test_image, made, "vb-web")
    _exited(cli, test_image, made, "vb-done")
    assert cli("pause", "vb-web").returncode == 0
    cases = {
        ("pause", "vb-web"): "container vb-web is already paused",
        ("pause", "vb-done"): "container vb-done is not running",
        ("unpause", "vb-done"): "container vb-done is not paused",
        ("kill", "vb-done"): "container vb-done is not running",
        ("stop", "nosuch"): "No such container: nosuch",
        ("pause", "nosuch"): "No such container: nosuch",
        ("kill", "nosuch"): "No such container: nosuch",
        ("inspect", "nosuch"): "No such container: nosuch",
        ("logs", "nosuch"): "No such container: nosuch",
    }
    for argv, message in cases.items():
        out = cli(*argv)
        assert out.returncode != 0, argv
        assert out.stderr == f"ctrexec: {message}\n", argv
        assert not INTERNAL.search(out.stderr), argv
    assert cli("unpause", "vb-web").returncode == 0
    out = cli("unpause", "vb-web")
    assert (out.returncode, out.stderr) == (1, "ctrexec: container vb-web is not paused\n")


def test_start_of_a_running_task_is_a_no_op(cli: Cli, test_image: str, made: list[str]) -> None:
    _sleeper(cli, test_image, made, "vb-up")
    pid = _pid(cli, "vb-up")
    out = cli("start", "vb-up")
    assert (out.returncode, out.stdout, out.stderr) == (0, "vb-up\n", "")
    assert _pid(cli, "vb-up") == pid


def _pid(cli: Cli, name: str) -> int:
    import json

    out = cli("inspect", name)
    assert out.returncode == 0, out.stderr
    pid: int = json.loads(out.stdout)[0]["State"]["Pid"]
    return pid
