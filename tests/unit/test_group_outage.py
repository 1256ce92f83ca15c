"""``group up`` cut short by containerd going away, without a daemon: when it counts as
gone, and the one line that says so."""

from __future__ import annotations

from typing import Any

from ctrexec import errors
from ctrexec.groups import outage


class _Client:
    def __init__(self, answers: bool) -> None:
        self.answers = answers
        self.probed = 0

    def version(self, *, timeout: float | None = None) -> object:
        self.probed += 1
        if not self.answers:
            raise errors.Unavailable("Version: connection refused")
        return object()


def test_containerd_is_gone_when_the_error_says_so_or_it_does_not_answer() -> None:
    up: Any = _Client(answers=True)
    assert outage.gone(up, errors.Unavailable("Tasks.Create: Stream removed"))
    assert outage.gone(up, errors.DeadlineExceeded("Tasks.Create: Deadline Exceeded"))
    assert up.probed == 0
    assert not outage.gone(up, errors.Internal("Tasks.Create: Stream removed"))
    down: Any = _Client(answers=False)
    assert outage.gone(down, errors.Internal("Tasks.Create: Stream removed"))


def test_the_line_names_the_group_the_daemon_what_is_left_and_the_command() -> None:
    err = outage.lost("web", "/run/containerd/containerd.sock", ["web-a", "web-b"])
    assert isinstance(err, errors.Unavailable) and err.exit_code == 125
    assert str(err) == (
        "group web: containerd at /run/containerd/containerd.sock went away during group up; "
        "could not remove web-a, web-b; run `ctrexec group up FILE` again once it is back"
    )
    assert "could not remove" not in str(outage.lost("web", "/s", []))
