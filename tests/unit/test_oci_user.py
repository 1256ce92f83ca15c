"""User strings against passwd/group text, and that text read from a rootfs by the one
root-confined reader (``ctrexec._linux.read_in_root``), as the executor does."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ctrexec import _linux
from ctrexec.errors import InvalidArgument
from ctrexec.oci import (
    ResolvedUser,
    parse_group,
    parse_passwd,
    resolve_user_spec,
)
from ctrexec.oci.user import check_group_add

pytestmark = pytest.mark.unit

PASSWD = """\
root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
# a comment
broken line
app:x:1000:1000:App User:/home/app:/bin/sh
www:x:33:33::/var/www:/bin/false
bad:x:notanumber:1::/:/bin/sh
"""

GROUP = """\
root:x:0:
daemon:x:1:
app:x:1000:
www-data:x:33:app
audio:x:29:app,www
staff:x:50:other
"""


def test_parse_passwd_skips_malformed_lines() -> None:
    entries = parse_passwd(PASSWD)
    assert [e.name for e in entries] == ["root", "daemon", "app", "www"]
    app = entries[2]
    assert (app.uid, app.gid, app.home, app.shell) == (1000, 1000, "/home/app", "/bin/sh")


def test_parse_group() -> None:
    groups = {g.name: g for g in parse_group(GROUP)}
    assert groups["audio"].gid == 29
    assert groups["audio"].members == ("app", "www")
    assert groups["root"].members == ()


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        ("", ResolvedUser(0, 0, (0,), "/root", "root")),
        ("root", ResolvedUser(0, 0, (0,), "/root", "root")),
        ("0", ResolvedUser(0, 0, (0,), "/root", "root")),
        # by name: primary gid from passwd, supplementary groups from membership, and
        # the primary gid first among them, as docker lists it
        ("app", ResolvedUser(1000, 1000, (1000, 33, 29), "/home/app", "app")),
        # a numeric uid that is in passwd resolves like its name
        ("1000", ResolvedUser(1000, 1000, (1000, 33, 29), "/home/app", "app")),
        # a numeric uid that is not in passwd is allowed: gid 0, home /
        ("4242", ResolvedUser(4242, 0, (0,), "/", None)),
        ("4242:4243", ResolvedUser(4242, 4243, (4243,), "/", None)),
        # an explicit group replaces the primary gid and drops the other supplementary ones
        ("app:staff", ResolvedUser(1000, 50, (50,), "/home/app", "app")),
        ("app:7", ResolvedUser(1000, 7, (7,), "/home/app", "app")),
        ("1000:audio", ResolvedUser(1000, 29, (29,), "/home/app", "app")),
        ("4242:audio", ResolvedUser(4242, 29, (29,), "/", None)),
        ("www", ResolvedUser(33, 33, (33, 29), "/var/www", "www")),
    ],
)
def test_resolve_user_spec(user: str, expected: ResolvedUser) -> None:
    assert resolve_user_spec(user, PASSWD, GROUP) == expected


def test_unknown_names_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="user 'nobody' not found in image"):
        resolve_user_spec("nobody", PASSWD, GROUP)
    with pytest.raises(InvalidArgument, match="group 'wheel' not found in image"):
        resolve_user_spec("app:wheel", PASSWD, GROUP)


def test_missing_files_allow_numbers_only() -> None:
    assert resolve_user_spec("1000:1000", None, None) == ResolvedUser(1000, 1000, (1000,))
    with pytest.raises(InvalidArgument, match="not found in image"):
        resolve_user_spec("app", None, None)


@pytest.mark.parametrize("bad", ["app:", ":1000", "2147483648", "0:2147483648"])
def test_malformed_user_strings(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        resolve_user_spec(bad, PASSWD, GROUP)


def read_rootfs_file(rootfs: Path, path: str) -> str | None:
    data = _linux.read_in_root(str(rootfs), [path])[path]
    return None if data is None else data.decode(errors="replace")


def resolve_user(rootfs: Path, user: str) -> ResolvedUser:
    """As ``Executor._resolve_user`` does it, with the rootfs already mounted."""
    return resolve_user_spec(
        user, read_rootfs_file(rootfs, "/etc/passwd"), read_rootfs_file(rootfs, "/etc/group")
    )


def _rootfs(tmp_path: Path) -> Path:
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "etc" / "group").write_text(GROUP)
    return rootfs


def _outside(tmp_path: Path) -> Path:
    """A host file that looks like a passwd with a user the image does not have."""
    outside = tmp_path / "host" / "shadow-outside"
    outside.parent.mkdir()
    outside.write_text("evil:x:0:0::/:/bin/sh\n")
    return outside


def test_resolve_user_from_rootfs(tmp_path: Path) -> None:
    rootfs = _rootfs(tmp_path)
    (rootfs / "etc" / "passwd").write_text(PASSWD)
    assert resolve_user(rootfs, "app") == ResolvedUser(
        1000, 1000, (1000, 33, 29), "/home/app", "app"
    )


def test_symlink_inside_rootfs_is_followed(tmp_path: Path) -> None:
    rootfs = _rootfs(tmp_path)
    (rootfs / "lib").mkdir()
    (rootfs / "lib" / "passwd").write_text(PASSWD)
    (rootfs / "etc" / "passwd").symlink_to("../lib/passwd")
    assert resolve_user(rootfs, "app").uid == 1000
    # An absolute link resolves against the rootfs, as the task will see it.
    (rootfs / "etc" / "passwd").unlink()
    (rootfs / "etc" / "passwd").symlink_to("/lib/passwd")
    assert resolve_user(rootfs, "app").uid == 1000


@pytest.mark.parametrize("kind", ["absolute", "relative", "dotdot-dir", "dir-link"])
def test_malicious_symlink_does_not_escape(tmp_path: Path, kind: str) -> None:
    rootfs = _rootfs(tmp_path)
    outside = _outside(tmp_path)
    passwd = rootfs / "etc" / "passwd"
    if kind == "absolute":
        passwd.symlink_to(outside)  # /etc/passwd -> <host path>
    elif kind == "relative":
        passwd.symlink_to(os.path.relpath(outside, passwd.parent))  # ../../host/...
    elif kind == "dotdot-dir":
        (rootfs / "up").symlink_to("../../../../../../..")
        passwd.symlink_to(f"/up{outside}")
    else:
        (rootfs / "etc" / "group").unlink()
        (rootfs / "etc").rmdir()
        (rootfs / "etc").symlink_to(outside.parent)  # /etc -> <host dir>
        (outside.parent / "passwd").write_text("evil:x:0:0::/:/bin/sh\n")
    assert read_rootfs_file(rootfs, "/etc/passwd") is None
    with pytest.raises(InvalidArgument, match="user 'evil' not found in image"):
        resolve_user(rootfs, "evil")


def test_symlink_loop_is_no_file(tmp_path: Path) -> None:
    rootfs = _rootfs(tmp_path)
    (rootfs / "etc" / "passwd").symlink_to("passwd2")
    (rootfs / "etc" / "passwd2").symlink_to("passwd")
    assert read_rootfs_file(rootfs, "/etc/passwd") is None
    with pytest.raises(InvalidArgument, match="user 'app' not found in image"):
        resolve_user(rootfs, "app")


def test_fifo_is_no_file_and_never_blocks(tmp_path: Path) -> None:
    rootfs = _rootfs(tmp_path)
    os.mkfifo(rootfs / "etc" / "passwd")
    assert read_rootfs_file(rootfs, "/etc/passwd") is None
    with pytest.raises(InvalidArgument, match="user 'app' not found in image"):
        resolve_user(rootfs, "app")


def test_directory_is_no_file(tmp_path: Path) -> None:
    rootfs = _rootfs(tmp_path)
    (rootfs / "etc" / "passwd").mkdir()
    assert read_rootfs_file(rootfs, "/etc/passwd") is None
    assert resolve_user(rootfs, "1000") == ResolvedUser(1000, 0, (0,), "/", None)


def test_missing_etc_allows_numeric_users(tmp_path: Path) -> None:
    rootfs = tmp_path / "empty"
    rootfs.mkdir()
    assert resolve_user(rootfs, "123:456") == ResolvedUser(123, 456, (456,))
    assert read_rootfs_file(rootfs, "/etc/passwd") is None


def test_group_add_after_the_users_own_groups() -> None:
    passwd = "app:x:1000:1000::/home/app:/bin/sh\n"
    group = "app:x:1000:\nstaff:x:50:app\naudio:x:29:\n"
    resolved = resolve_user_spec("app", passwd, group, ["audio", "4321", "staff"])
    assert resolved.additional_gids == (1000, 50, 29, 4321)
    assert resolve_user_spec("", None, group, ["29"]).additional_gids == (0, 29)


def test_group_add_errors() -> None:
    with pytest.raises(InvalidArgument) as info:
        resolve_user_spec("", None, "audio:x:29:\n", ["video"])
    assert str(info.value) == "Unable to find group video: no matching entries in group file"
    with pytest.raises(InvalidArgument, match="out of range"):
        check_group_add(["4294967296"])
    with pytest.raises(InvalidArgument, match="must not be empty"):
        check_group_add([" "])
