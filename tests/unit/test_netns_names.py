"""Name validation, path resolution and namespace checks that need no root."""

from __future__ import annotations

import os
import threading
import uuid

import pytest

from ctrexec import _linux
from ctrexec.errors import InvalidArgument, NotFound
from ctrexec.net import netns

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", ["a", "A1", "cxt-group_1.web", "0", "x" * 64])
def test_valid_names(name: str) -> None:
    assert netns.validate_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        ".",
        "..",
        ".hidden",
        "-dash",
        "_under",
        "a/b",
        "../etc",
        "/run/netns/x",
        "a b",
        "a\0b",
        "a\nb",
        "é",
        "x" * 65,
    ],
)
def test_invalid_names(name: str) -> None:
    with pytest.raises(InvalidArgument):
        netns.validate_name(name)


def test_name_must_be_a_string() -> None:
    with pytest.raises(InvalidArgument):
        netns.validate_name(42)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["eth0", "lo", "cxtbr-0123456", "x" * 15, "veth@1"])
def test_valid_ifnames(name: str) -> None:
    assert netns.validate_ifname(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 16, "a/b", "a:b", "a b", "a\tb"])
def test_invalid_ifnames(name: str) -> None:
    with pytest.raises(InvalidArgument):
        netns.validate_ifname(name)


def test_ifname_part_respects_room_left() -> None:
    assert netns.validate_ifname_part("abc", max_len=3) == "abc"
    with pytest.raises(InvalidArgument):
        netns.validate_ifname_part("abcd", max_len=3)
    with pytest.raises(InvalidArgument):
        netns.validate_ifname_part("a/b")
    with pytest.raises(InvalidArgument):
        netns.validate_ifname_part("x" * 16)


def test_resolve_name_and_paths() -> None:
    assert netns.resolve("grp1") == "/run/netns/grp1"
    assert netns.resolve("/var/run/netns/../netns/x") == "/var/run/netns/x"
    assert netns.resolve("/proc/1234/ns/net") == "/proc/1234/ns/net"


@pytest.mark.parametrize("spec", ["", "rel/path", "./x", "bad name", "..", "a\0b"])
def test_resolve_rejects(spec: str) -> None:
    with pytest.raises(InvalidArgument):
        netns.resolve(spec)


def test_resolve_never_creates_anything() -> None:
    name = f"cxt-resolve-{uuid.uuid4().hex[:8]}"
    path = netns.resolve(name)
    assert not os.path.lexists(path)


def test_verify_missing_is_not_found(tmp_path: os.PathLike[str]) -> None:
    with pytest.raises(NotFound):
        netns.verify(os.path.join(tmp_path, "nope"))


def test_verify_relative_path_is_invalid() -> None:
    with pytest.raises(InvalidArgument):
        netns.verify("relative/ns")


def test_verify_refuses_a_regular_file(tmp_path: os.PathLike[str]) -> None:
    for content in (b"", b"data"):
        path = os.path.join(tmp_path, f"f{len(content)}")
        with open(path, "wb") as f:
            f.write(content)
        with pytest.raises(InvalidArgument, match="not a network namespace"):
            netns.verify(path)


def test_verify_refuses_a_directory(tmp_path: os.PathLike[str]) -> None:
    with pytest.raises(InvalidArgument):
        netns.verify(os.fspath(tmp_path))


def test_verify_refuses_a_fifo_without_blocking(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "fifo")
    os.mkfifo(path)
    with pytest.raises(InvalidArgument):
        netns.verify(path)


def test_verify_refuses_our_own_namespace_unless_asked() -> None:
    # This process runs in the host's namespace (or in the one it treats as such).
    with pytest.raises(InvalidArgument, match="host"):
        netns.verify("/proc/self/ns/net")
    netns.verify("/proc/self/ns/net", allow_host=True)


def test_verify_refuses_other_namespace_types() -> None:
    with pytest.raises(InvalidArgument, match="not a network"):
        netns.verify("/proc/self/ns/mnt", allow_host=True)


def test_is_mounted(tmp_path: os.PathLike[str]) -> None:
    assert netns.is_mounted("/proc")
    assert not netns.is_mounted(os.fspath(tmp_path))
    assert not netns.is_mounted(os.path.join(tmp_path, "missing"))


def test_mount_table_unescapes_and_reads_the_type() -> None:
    line = r"36 25 0:4 net:[4026532281] /run/a\040b\011c\134d rw shared:5 - nsfs nsfs rw"
    assert _linux.mount_table(line) == [("/run/a b\tc\\d", "nsfs")]


def test_fresh_thread_returns_and_raises() -> None:
    caller = threading.get_ident()
    assert _linux.run_in_fresh_thread(threading.get_ident) != caller

    def boom() -> None:
        raise ValueError("inside")

    with pytest.raises(ValueError, match="inside"):
        _linux.run_in_fresh_thread(boom)


def test_nsfs_checks_on_our_own_namespace() -> None:
    fd = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        assert _linux.fstatfs_type(fd) == _linux.NSFS_MAGIC
        assert _linux.ns_type(fd) == _linux.CLONE_NEWNET
    finally:
        os.close(fd)
