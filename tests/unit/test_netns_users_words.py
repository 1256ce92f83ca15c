"""How netns rm and ls name what uses a namespace, and the cgroup they read it from."""

from __future__ import annotations

import io

import pytest

from ctrexec import ids
from ctrexec.cli import progress
from ctrexec.images.registry.pull import PullEvent
from ctrexec.net.nsrefs import NetnsUser


@pytest.mark.parametrize(
    ("user", "words"),
    [
        (NetnsUser(how="process", pid=12, command="sleep"), "pid 12 (sleep)"),
        (
            NetnsUser(how="process", pid=12, command="sleep", container="web"),
            "pid 12 (sleep) of container web",
        ),
        (NetnsUser(how="fd", pid=7, command="nomad"), "pid 7 (nomad) through an open fd"),
        (NetnsUser(how="mount", mount="/run/docker/netns/x"), "mount /run/docker/netns/x"),
    ],
)
def test_users_in_words(user: NetnsUser, words: str) -> None:
    assert str(user) == words


def test_task_cgroup_round_trip() -> None:
    path = ids.task_cgroup("ctrexec-test", "web")
    assert path == "/ctrexec/ctrexec-test/web"
    assert ids.task_of_cgroup(path) == ("ctrexec-test", "web")
    assert ids.task_of_cgroup("/ctrexec/ctrexec-test/web/sub") == ("ctrexec-test", "web")
    assert ids.task_of_cgroup("/system.slice/ssh.service") is None
    assert ids.task_of_cgroup("/ctrexec/only-ns") is None


@pytest.mark.parametrize("renderer", [progress.Lines, progress.Bars])
def test_missing_image_line_is_docker_s(renderer: type[progress.Lines]) -> None:
    out = io.StringIO()
    renderer(out)(PullEvent("missing", "docker.io/library/x:latest"))
    assert out.getvalue() == "Unable to find image 'docker.io/library/x:latest' locally\n"
