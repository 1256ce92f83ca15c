"""cp's tar streams below a hostile root, docker's destination rules and argument split."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from ctrexec import _linux, errors
from ctrexec.cli.copy import split_endpoint
from ctrexec.tasks import copyarchive, copying

ME = (os.getuid(), os.getgid())


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, Path]:
    """(root, host): a root whose links aim at the host directory next to it."""
    host, root = tmp_path / "host", tmp_path / "root"
    host.mkdir()
    (host / "secret").write_text("host")
    (root / "host").mkdir(parents=True)
    (root / "host" / "secret").write_text("inside")
    (root / "escape").symlink_to("../../../../host/secret")
    (root / "abs").symlink_to(host / "secret")
    (root / "dirlink").symlink_to(host)
    (root / "up").symlink_to("../../../..")
    (root / str(host).lstrip("/")).mkdir(parents=True)  # where the absolute links land
    return root, host


def _tar_of(root: Path, path: str, *, follow: bool) -> tarfile.TarFile:
    buf = io.BytesIO()
    fd = _linux.open_root(str(root))
    try:
        copyarchive.write_tar(fd, path, buf, arcname="x", follow=follow)
    finally:
        os.close(fd)
    buf.seek(0)
    return tarfile.open(fileobj=buf)


def _extract(root: Path, dest: str, members: list[tuple[tarfile.TarInfo, bytes]]) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    buf.seek(0)
    fd = _linux.open_root(str(root))
    try:
        with tarfile.open(fileobj=buf) as tar:
            copyarchive.extract_tar(fd, dest, tar, owner=ME)
    finally:
        os.close(fd)


def _file(name: str, mode: int = 0o640) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info


def test_reading_follows_links_only_inside_the_root(hostile: tuple[Path, Path]) -> None:
    root, host = hostile
    tar = _tar_of(root, "/escape", follow=True)
    member = tar.getmember("x")
    got = tar.extractfile(member)
    assert got is not None and got.read() == b"inside"
    link = _tar_of(root, "/escape", follow=False).getmember("x")
    assert link.issym() and link.linkname == "../../../../host/secret"
    with pytest.raises(FileNotFoundError):  # the host's absolute path is not in the root
        _tar_of(root, "/abs", follow=True)
    assert (root / "abs").readlink() == host / "secret"


def test_a_tree_keeps_its_links_as_links(hostile: tuple[Path, Path]) -> None:
    root, _ = hostile
    names = {m.name: m for m in _tar_of(root, "/", follow=False)}
    assert names["x/dirlink"].issym()
    assert "x/dirlink/secret" not in names  # never walked through
    assert names["x/up"].issym()


def test_writing_through_a_symlinked_parent_stays_inside(hostile: tuple[Path, Path]) -> None:
    root, host = hostile
    _extract(root, "/dirlink", [(_file("new"), b"data")])
    _extract(root, "/up/etc", [(_file("passwd"), b"data")])
    assert not (host / "new").exists()
    assert (root / str(host).lstrip("/") / "new").read_bytes() == b"data"
    assert (root / "etc" / "passwd").read_bytes() == b"data"
    assert (host / "secret").read_text() == "host"


def test_an_existing_link_is_replaced_not_written_through(hostile: tuple[Path, Path]) -> None:
    root, host = hostile
    _extract(root, "/", [(_file("abs", 0o600), b"replaced")])
    assert not (root / "abs").is_symlink()
    assert (root / "abs").read_bytes() == b"replaced"
    assert (root / "abs").stat().st_mode & 0o777 == 0o600
    assert (host / "secret").read_text() == "host"


@pytest.mark.parametrize("name", ["../evil", "a/../../evil", "/../../evil"])
def test_members_climbing_out_are_refused(hostile: tuple[Path, Path], name: str) -> None:
    root, _ = hostile
    (root / "d").mkdir()
    with pytest.raises(errors.InvalidArgument):
        _extract(root, "/d", [(_file(name), b"x")])
    assert not (root / "evil").exists()


def test_a_relative_symlink_out_of_the_destination_is_refused(hostile: tuple[Path, Path]) -> None:
    root, _ = hostile
    link = tarfile.TarInfo("l")
    link.type, link.linkname = tarfile.SYMTYPE, "../../../etc"
    (root / "d").mkdir()
    with pytest.raises(errors.InvalidArgument, match="invalid symlink"):
        _extract(root, "/d", [(link, b"")])


def test_a_directory_is_not_replaced_by_a_file(hostile: tuple[Path, Path]) -> None:
    root, _ = hostile
    with pytest.raises(errors.FailedPrecondition, match="cannot overwrite directory"):
        _extract(root, "/", [(_file("host"), b"x")])


@pytest.mark.parametrize(
    ("src_is_dir", "arcname", "dst", "kind", "want"),
    [
        (False, "f", "/d", "dir", ("/d", None)),
        (False, "f", "/new", None, ("/", ("f", "new"))),
        (False, "f", "/old", "file", ("/", ("f", "old"))),
        (True, "d", "/new", None, ("/", ("d", "new"))),
        (True, "d", "/new/", None, ("/", ("d", "new"))),
        (True, ".", "/e", "dir", ("/e", None)),
        (True, ".", "/e", None, ("/", (".", "e"))),
    ],
)
def test_docker_destination_rules(
    src_is_dir: bool,
    arcname: str,
    dst: str,
    kind: str | None,
    want: tuple[str, tuple[str, str] | None],
) -> None:
    target = copying.plan(src_is_dir, arcname, dst, kind, True)
    assert (target.directory, target.rebase) == want


def test_docker_destination_errors() -> None:
    with pytest.raises(errors.InvalidArgument, match="cannot copy directory"):
        copying.plan(True, "d", "/f", "file", True)
    with pytest.raises(errors.NotFound, match="no such directory"):
        copying.plan(False, "f", "/missing/", None, True)


def test_contents_rebase_to_a_new_name(tmp_path: Path) -> None:
    info = tarfile.TarInfo("./a")
    assert copyarchive.clean("x/../..//y") == "/y"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info.size = 1
        tar.addfile(info, io.BytesIO(b"a"))
    buf.seek(0)
    fd = _linux.open_root(str(tmp_path))
    try:
        with tarfile.open(fileobj=buf) as tar:
            copyarchive.extract_tar(fd, "/", tar, rebase=(".", "new"), owner=ME)
    finally:
        os.close(fd)
    assert (tmp_path / "new" / "a").read_bytes() == b"a"


@pytest.mark.parametrize(
    ("word", "container", "path"),
    [
        ("web:/etc/hosts", "web", "/etc/hosts"),
        ("web:etc", "web", "etc"),
        ("/abs/with:colon", "", "/abs/with:colon"),
        ("./rel:colon", "", "./rel:colon"),
        ("plain", "", "plain"),
        ("-", "", "-"),
    ],
)
def test_endpoint_split_like_docker(word: str, container: str, path: str) -> None:
    assert split_endpoint(word) == (container, path)


def test_a_link_swapped_in_after_the_check_is_not_written_through(
    hostile: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worst moment: the name was cleared, and a link to the host appears before the
    file is opened. The open refuses it (O_EXCL, O_NOFOLLOW); the host file is unchanged."""
    root, host = hostile
    cleared = copyarchive._clear

    def swap(pfd: int, base: str, path: str) -> None:
        cleared(pfd, base, path)
        os.symlink(host / "secret", base, dir_fd=pfd)

    monkeypatch.setattr(copyarchive, "_clear", swap)
    with pytest.raises(FileExistsError):
        _extract(root, "/", [(_file("victim"), b"overwritten")])
    assert (host / "secret").read_text() == "host"


def _archive_of_host(path: str, arcname: str) -> list[tuple[tarfile.TarInfo, bytes]]:
    buf = io.BytesIO()
    fd = _linux.open_root("/")
    try:
        copyarchive.write_tar(fd, path, buf, arcname=arcname)
    finally:
        os.close(fd)
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        return [(m, (tar.extractfile(m) or io.BytesIO()).read()) for m in tar]


def test_a_pseudo_filesystem_directory_is_archived_empty() -> None:
    """sysfs's files are the kernel's state (and read shorter than their stat says):
    the directory is there, as docker's /sys is, its contents not."""
    members = _archive_of_host("/sys/devices/system/cpu", "cpu")
    assert [(m.name, m.isdir()) for m, _ in members] == [("cpu", True)]


def test_a_file_shorter_than_its_stat_keeps_the_archive_whole() -> None:
    """sysfs's ``online`` says 4096 bytes and reads a few, as a file truncated while cp
    reads it does: the rest is zeros, and the archive stays readable to its end."""
    path = "/sys/devices/system/cpu/online"
    [(member, data)] = _archive_of_host(path, "online")
    assert member.size == os.stat(path).st_size == len(data)
    text = Path(path).read_bytes()
    assert len(text) < member.size
    assert data == text + bytes(member.size - len(text))
