"""The public calls a scheduler's driver uses around a task (docs/library.md)."""

from __future__ import annotations

import pytest

from ctrexec import InvalidArgument, cgroupfs_relative, nomad_labels, nomad_task_id


def test_nomad_labels_read_back_as_the_task_id() -> None:
    labels = nomad_labels("a1/web/x9", "a1", "web", ("10.0.0.5",))
    assert nomad_task_id(labels) == "a1/web/x9"
    assert nomad_task_id({"other": "x"}) is None


def test_cgroupfs_relative_strips_the_root() -> None:
    assert cgroupfs_relative("/sys/fs/cgroup/nomad.slice/a.scope") == "/nomad.slice/a.scope"


@pytest.mark.parametrize(
    "path",
    ["/sys/fs/cgroup/../etc", "/etc/x", "/sys/fs/cgroupx/a", "relative", "/sys/fs/cgroup//a"],
)
def test_cgroupfs_relative_refuses_what_leaves_the_root(path: str) -> None:
    with pytest.raises(InvalidArgument):
        cgroupfs_relative(path)
