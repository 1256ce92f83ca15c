"""Which directory a failed Tasks.Create says is in the way (containerd/bundles.left_by).

Only a path of the runtime v2 layout for exactly the container's namespace and id is
taken: it is removed afterwards, so anything else must read as None.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ctrexec.containerd.bundles import left_by, vanished
from ctrexec.containerd.tasks import command_error
from ctrexec.errors import CtrexecError

STATE = "/var/tmp/cxd-x/state/io.containerd.runtime.v2.task"


def _err(text: str) -> CtrexecError:
    return CtrexecError(text)  # what an Unknown status becomes


def test_the_bundle_named_by_containerd_is_taken() -> None:
    exc = _err(f"failed to start shim: mkdir {STATE}/ns1/web-a: file exists")
    assert left_by(exc, "ns1", "web-a") == Path(f"{STATE}/ns1/web-a")


def test_the_work_directory_is_taken_too() -> None:
    exc = _err(
        "failed to start shim: mkdir /var/lib/c/io.containerd.runtime.v2.task/ns1/a: file exists"
    )
    assert left_by(exc, "ns1", "a") == Path("/var/lib/c/io.containerd.runtime.v2.task/ns1/a")


@pytest.mark.parametrize(
    "text",
    [
        f"failed to start shim: mkdir {STATE}/ns1/other: file exists",  # another id
        f"failed to start shim: mkdir {STATE}/ns2/web-a: file exists",  # another namespace
        "failed to start shim: mkdir /etc/web-a: file exists",  # not the runtime's layout
        f"failed to start shim: mkdir {STATE}/ns1/../ns1/web-a: file exists",
        "failed to create shim task: OCI runtime create failed",  # no such error at all
    ],
)
def test_anything_else_is_not_taken(text: str) -> None:
    assert left_by(_err(text), "ns1", "web-a") is None


#: What containerd 1.6 answered when its cleanup of a cancelled create removed the
#: bundle of the next one as that one's shim started (seen in CI).
GETWD = (
    "failed to start shim: start failed: io.containerd.runc.v2: getwd: no such file or "
    "directory: exit status 1"
)


def test_a_bundle_removed_under_the_new_shim_is_sent_again_not_a_missing_command() -> None:
    assert vanished(_err(GETWD), "ns1", "a")
    assert left_by(_err(GETWD), "ns1", "a") is None
    assert command_error(_err(GETWD)).__class__ is CtrexecError  # not exit 127


def test_a_missing_command_is_still_one() -> None:
    text = 'runc create failed: exec: "/nope": stat /nope: no such file or directory'
    assert not vanished(_err(text), "ns1", "a")
    assert type(command_error(_err(text))).__name__ == "CommandNotFound"


#: What containerd 2.1 answered in the same race (seen in CI): the shim started, then
#: containerd could not write the file it keeps in the bundle.
SHIM_PATH = (
    f"failed to start shim: start failed: open {STATE}/ns1/a/shim-binary-path: "
    "no such file or directory"
)


def test_containerd_2s_form_of_the_same_race_is_sent_again() -> None:
    assert vanished(_err(SHIM_PATH), "ns1", "a")
    assert left_by(_err(SHIM_PATH), "ns1", "a") is None
    assert command_error(_err(SHIM_PATH)).__class__ is CtrexecError


@pytest.mark.parametrize(
    "text",
    [
        SHIM_PATH.replace("/ns1/a/", "/ns1/b/"),  # another container's bundle
        SHIM_PATH.replace("/ns1/a/", "/ns2/a/"),  # another namespace
        SHIM_PATH.replace(f"{STATE}/ns1/a/", "/etc/"),  # not the runtime's layout
        SHIM_PATH.replace("failed to start shim: ", ""),  # not the shim's start
    ],
)
def test_another_missing_file_is_not_that_race(text: str) -> None:
    assert not vanished(_err(text), "ns1", "a")
