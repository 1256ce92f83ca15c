"""``ctrexec cp`` through the real binary: both directions, tar streams, running, stopped
and never-started containers, docker's rules and words, and a container whose symlinks
aim at host files (absolute, ``..`` past the root, a symlinked parent): nothing on the
host is read or written through them."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from _cli import Cli

from ctrexec import _linux
from ctrexec.testing import wait_for

pytestmark = pytest.mark.integration


def _cp(
    cli: Cli, *args: str, stdin: bytes = b"", tmpdir: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ)
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    return subprocess.run(
        cli.argv("cp", *args), input=stdin, capture_output=True, timeout=120, env=env, check=False
    )


def _ok(out: subprocess.CompletedProcess[bytes]) -> None:
    assert (out.returncode, out.stderr) == (0, b""), out.stderr


def _sh(cli: Cli, name: str, script: str) -> str:
    out = cli("exec", name, "sh", "-c", script)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """A host directory with a file the container's links aim at."""
    d = tmp_path / "host"
    d.mkdir()
    (d / "secret").write_text("host secret\n")
    return d


@pytest.fixture
def running(cli: Cli, test_image: str, made: list[str], host: Path) -> str:
    """A running container whose /data holds a tree, a chowned file and hostile links.
    The host directory's path exists inside it too, with other content."""
    made.append("cp-run")
    out = cli("run", "-d", "--name", "cp-run", test_image, "sleep", "3600")
    assert out.returncode == 0, out.stderr
    _sh(
        cli, "cp-run",
        "mkdir -p /data/sub && echo hi > /data/sub/f && chown 1000:1001 /data/sub/f"
        f" && chmod 640 /data/sub/f && mkdir -p {host} && echo inside > {host}/secret"
        f" && ln -s {host}/secret /data/abs && ln -s {host} /data/dirlink"
        " && ln -s ../../../../../../../../.. /data/up && ln -s sub/f /data/rel",
    )  # fmt: skip
    return "cp-run"


def test_copy_out_a_directory_and_its_contents(cli: Cli, running: str, tmp_path: Path) -> None:
    _ok(_cp(cli, f"{running}:/data/sub", str(tmp_path / "new")))
    got = tmp_path / "new" / "f"
    assert got.read_text() == "hi\n"
    st = got.stat()
    assert (st.st_mode & 0o777, st.st_uid, st.st_gid) == (0o640, os.getuid(), os.getgid())
    (tmp_path / "existing").mkdir()
    _ok(_cp(cli, f"{running}:/data/sub", str(tmp_path / "existing")))
    assert (tmp_path / "existing" / "sub" / "f").read_text() == "hi\n"
    (tmp_path / "contents").mkdir()
    _ok(_cp(cli, f"{running}:/data/sub/.", str(tmp_path / "contents")))
    assert (tmp_path / "contents" / "f").read_text() == "hi\n"


def test_links_are_copied_as_links_and_followed_inside(
    cli: Cli, running: str, tmp_path: Path, host: Path
) -> None:
    _ok(_cp(cli, f"{running}:/data/abs", str(tmp_path / "link")))
    assert (tmp_path / "link").readlink() == host / "secret"  # the link itself, not read
    _ok(_cp(cli, "-L", f"{running}:/data/abs", str(tmp_path / "followed")))
    assert (tmp_path / "followed").read_text() == "inside\n"  # the container's file
    _ok(_cp(cli, "-L", f"{running}:/data/up/etc/hostname", str(tmp_path / "hn")))
    assert (tmp_path / "hn").read_text() == _sh(cli, running, "cat /etc/hostname")
    _ok(_cp(cli, f"{running}:/data/dirlink/secret", str(tmp_path / "via-dir")))
    assert (tmp_path / "via-dir").read_text() == "inside\n"


def test_copy_in_never_writes_through_a_link_to_the_host(
    cli: Cli, running: str, tmp_path: Path, host: Path
) -> None:
    src = tmp_path / "payload"
    src.write_text("payload\n")
    before = sorted(p.name for p in host.iterdir())
    _ok(_cp(cli, str(src), f"{running}:/data/dirlink/"))
    _ok(_cp(cli, str(src), f"{running}:/data/abs"))  # an existing link: followed inside
    _ok(_cp(cli, str(src), f"{running}:/data/up/tmp/escaped"))
    assert sorted(p.name for p in host.iterdir()) == before
    assert (host / "secret").read_text() == "host secret\n"
    assert _sh(cli, running, f"cat {host}/payload {host}/secret /tmp/escaped") == ("payload\n" * 3)


def test_ownership_and_modes_going_in(cli: Cli, running: str, tmp_path: Path) -> None:
    src = tmp_path / "owned"
    src.write_text("x")
    src.chmod(0o751)
    os.chown(src, 1234, 4321)
    _ok(_cp(cli, str(src), f"{running}:/data/plain"))
    _ok(_cp(cli, "-a", str(src), f"{running}:/data/kept"))
    assert _sh(cli, running, "stat -c '%a %u %g' /data/plain /data/kept") == (
        "751 0 0\n751 1234 4321\n"
    )


def test_tar_streams_both_ways(cli: Cli, running: str) -> None:
    out = _cp(cli, f"{running}:/data/sub", "-")
    assert out.returncode == 0, out.stderr
    with tarfile.open(fileobj=io.BytesIO(out.stdout)) as tar:
        members = {m.name: m for m in tar}
        assert sorted(members) == ["sub", "sub/f"]
        assert (members["sub/f"].uid, members["sub/f"].gid, members["sub/f"].mode) == (
            1000, 1001, 0o640,
        )  # fmt: skip
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("in/t")
        info.size, info.uid = 3, 77
        tar.addfile(info, io.BytesIO(b"tar"))
    _ok(_cp(cli, "-a", "-", f"{running}:/data", stdin=buf.getvalue()))
    assert _sh(cli, running, "cat /data/in/t; stat -c %u /data/in/t") == "tar77\n"


def test_a_hostile_archive_is_refused(cli: Cli, running: str) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../../../../escaped")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    out = _cp(cli, "-", f"{running}:/data/sub", stdin=buf.getvalue())
    assert out.returncode == 1
    assert b"outside the destination" in out.stderr
    assert _sh(cli, running, "ls /data/sub; ls / | grep -c escaped || true") == "f\n0\n"


def test_docker_errors_and_exit_codes(cli: Cli, running: str, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    cases = [
        ((f"{running}:/nope", str(tmp_path / "o")),
         f"ctrexec: Could not find the file /nope in container {running}\n"),
        (("cp-nosuch:/x", str(tmp_path / "o")), "ctrexec: No such container: cp-nosuch\n"),
        ((str(tmp_path / "a"), str(tmp_path / "b")),
         "ctrexec: must specify at least one container source\n"),
        ((f"{running}:/a", f"{running}:/b"),
         "ctrexec: copying between containers is not supported\n"),
        ((f"{running}:/data/sub/f/", str(tmp_path / "o")), "ctrexec: /data/sub/f/: not a directory\n"),
        ((f"{running}:/data/sub", str(tmp_path / "file")), "ctrexec: cannot copy directory\n"),
        ((f"{running}:/data/sub/f", str(tmp_path / "nodir") + "/"), "ctrexec: no such directory\n"),
        ((str(tmp_path / "file"), f"{running}:/no/such/dir"),
         f"ctrexec: Could not find the file /no/such in container {running}\n"),
    ]  # fmt: skip
    for args, message in cases:
        out = _cp(cli, *args)
        assert (out.returncode, out.stderr.decode()) == (1, message), args
    assert not (tmp_path / "o").exists()


def test_stopped_and_never_started_containers(
    cli: Cli, test_image: str, made: list[str], tmp_path: Path
) -> None:
    made += ["cp-stopped", "cp-created"]
    out = cli("run", "--name", "cp-stopped", test_image, "sh", "-c", "echo done > /s")
    assert out.returncode == 0, out.stderr
    spool = tmp_path / "spool"
    spool.mkdir()
    _ok(_cp(cli, "cp-stopped:/s", str(tmp_path / "s"), tmpdir=spool))
    assert (tmp_path / "s").read_text() == "done\n"
    out = cli("create", "--name", "cp-created", test_image, "cat", "/in/f")
    assert out.returncode == 0, out.stderr
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "f").write_text("copied before the start\n")
    _ok(_cp(cli, str(tmp_path / "in"), "cp-created:/", tmpdir=spool))
    started = cli("start", "-a", "cp-created")
    assert (started.returncode, started.stdout) == (0, "copied before the start\n")
    # Each mount was private to ctrexec's thread and is gone with it; so is its directory.
    assert [p for p in _linux.mount_points() if "ctrexec-cp-" in p] == []
    assert list(spool.iterdir()) == []


def test_a_running_container_is_copied_through_its_volumes(
    cli: Cli, test_image: str, made: list[str], tmp_path: Path
) -> None:
    made.append("cp-vol")
    vol = tmp_path / "vol"
    vol.mkdir()
    (vol / "v").write_text("from the volume\n")
    out = cli("run", "-d", "--name", "cp-vol", "-v", f"{vol}:/vol", test_image, "sleep", "3600")
    assert out.returncode == 0, out.stderr
    _ok(_cp(cli, "cp-vol:/vol/v", str(tmp_path / "v")))
    assert (tmp_path / "v").read_text() == "from the volume\n"
    (tmp_path / "w").write_text("into the volume\n")
    _ok(_cp(cli, str(tmp_path / "w"), "cp-vol:/vol/"))
    assert (vol / "w").read_text() == "into the volume\n"


def test_a_read_only_container_is_not_written(
    cli: Cli, test_image: str, made: list[str], tmp_path: Path
) -> None:
    made += ["cp-ro-run", "cp-ro-stopped"]
    for name, cmd in (("cp-ro-run", ["-d"]), ("cp-ro-stopped", [])):
        argv = ["--read-only", "--name", name, *cmd, test_image]
        out = cli("run", *argv, *(["sleep", "3600"] if cmd else ["true"]))
        assert out.returncode == 0, out.stderr
    (tmp_path / "f").write_text("x")
    for name in ("cp-ro-run", "cp-ro-stopped"):
        out = _cp(cli, str(tmp_path / "f"), f"{name}:/f")
        assert (out.returncode, out.stderr) == (
            1,
            b"ctrexec: container rootfs is marked read-only\n",
        )
        _ok(_cp(cli, f"{name}:/etc/hostname", str(tmp_path / f"{name}.out")))  # reading is fine


def test_a_link_swapped_in_meanwhile_leads_nowhere_on_the_host(
    cli: Cli, test_image: str, made: list[str], tmp_path: Path, host: Path
) -> None:
    """The container flips /swap between a directory and a link to the host's directory
    (and its own copy of that path) while cp goes in and out through it: whatever the
    interleaving, cp succeeds or fails inside the container, and the host is untouched."""
    made.append("cp-swap")
    flip = (
        f"mkdir -p {host} && echo inside > {host}/secret; "
        f"while :; do rm -rf /swap; mkdir /swap; echo dir > /swap/secret; rm -rf /swap; "
        f"ln -s {host} /swap; done"
    )
    out = cli("run", "-d", "--name", "cp-swap", test_image, "sh", "-c", flip)
    assert out.returncode == 0, out.stderr
    (tmp_path / "secret").write_text("payload\n")
    before = {p.name: p.read_bytes() for p in host.iterdir()}
    seen = set()
    for i in range(6):
        _cp(cli, str(tmp_path / "secret"), "cp-swap:/swap/")
        got = _cp(cli, "cp-swap:/swap/secret", "-")
        if got.returncode == 0:
            with tarfile.open(fileobj=io.BytesIO(got.stdout)) as tar:
                member = tar.extractfile("secret")
                assert member is not None
                seen.add(member.read())
        assert {p.name: p.read_bytes() for p in host.iterdir()} == before, i
    assert seen <= {b"inside\n", b"dir\n", b"payload\n", b""}  # b"": caught mid-write


def _members(out: subprocess.CompletedProcess[bytes]) -> dict[str, bytes | None]:
    """Each member of a tar stream by its clean name: a file's bytes, None for the rest.
    Reading every member checks the stream is whole to its end."""
    _ok(out)
    got: dict[str, bytes | None] = {}
    with tarfile.open(fileobj=io.BytesIO(out.stdout)) as tar:
        for m in tar:
            data = tar.extractfile(m) if m.isreg() else None
            got[os.path.normpath(m.name)] = data.read() if data is not None else None
    return got


def _state(cli: Cli, name: str) -> str:
    return cli("inspect", "-f", "{{.State.Status}}", name).stdout.strip()


def test_a_whole_container_comes_out_with_its_mounts_without_the_kernels(
    cli: Cli, test_image: str, made: list[str], tmp_path: Path
) -> None:
    """``cp NAME:/. -``, README's stand-in for ``docker export``: the rootfs and a bind
    mount come out, /proc and /sys only as the empty directories docker's archive has
    (walking /proc died on /proc/self, which names nothing outside the task's pids)."""
    made.append("cp-all")
    bound = tmp_path / "bound"
    bound.mkdir()
    (bound / "b").write_text("bound\n")
    ro = tmp_path / "ro"
    ro.mkdir()
    volumes = ["-v", f"{bound}:/bound", "-v", f"{ro}:/ro:ro"]
    out = cli("run", "-d", "--name", "cp-all", *volumes, test_image, "sleep", "3600")
    assert out.returncode == 0, out.stderr
    _sh(
        cli, "cp-all", "echo t > /tmp/t && mkdir -p /var/v && echo v > /var/v/f && echo r > /root/r"
    )
    files = {"tmp/t": b"t\n", "var/v/f": b"v\n", "root/r": b"r\n", "bound/b": b"bound\n"}
    got = _members(_cp(cli, "cp-all:/.", "-"))
    assert {k: got.get(k) for k in files} == files
    assert [k for k in got if k.startswith(("proc/", "sys/"))] == []
    assert {"proc", "sys"} <= set(got)
    whole = tmp_path / "whole"
    whole.mkdir()
    _ok(_cp(cli, "cp-all:/", str(whole)))
    assert {k: (whole / k).read_bytes() for k in files} == files
    assert list((whole / "proc").iterdir()) == list((whole / "sys").iterdir()) == []
    _ok(_cp(cli, "cp-all:/var/v", str(tmp_path / "v")))
    assert (tmp_path / "v" / "f").read_text() == "v\n"
    # Stopped: its snapshot with the bind mount over it again, as docker's cp mounts it.
    assert cli("kill", "cp-all").returncode == 0
    wait_for(lambda: _state(cli, "cp-all") == "exited", timeout=60, what="cp-all exited")
    got = _members(_cp(cli, "cp-all:/.", "-"))
    assert {k: got.get(k) for k in files} == files
    assert [k for k in got if k.startswith(("proc/", "sys/"))] == []
    (bound / "later").write_text("later\n")
    _ok(_cp(cli, "cp-all:/bound/later", str(tmp_path / "later")))
    assert (tmp_path / "later").read_text() == "later\n"
    (tmp_path / "in").write_text("in\n")
    _ok(_cp(cli, str(tmp_path / "in"), "cp-all:/bound/"))
    assert (bound / "in").read_text() == "in\n"
    assert _cp(cli, str(tmp_path / "in"), "cp-all:/ro/").returncode == 1
    assert list(ro.iterdir()) == []
    assert [p for p in _linux.mount_points() if "ctrexec-cp-" in p] == []
    made.append("cp-all-new")  # never started: its mount point may not be made yet
    out = cli("create", "--name", "cp-all-new", "-v", f"{bound}:/new/b", test_image, "true")
    assert out.returncode == 0, out.stderr
    assert "bin" in _members(_cp(cli, "cp-all-new:/.", "-"))
    stopped = tmp_path / "stopped"
    _ok(_cp(cli, "cp-all:/var/v", str(stopped)))
    assert (stopped / "f").read_text() == "v\n"


def test_files_vanishing_while_the_tree_is_read_are_not_fatal(
    cli: Cli, test_image: str, made: list[str]
) -> None:
    """The container makes and removes files, directories and processes without a
    pause while cp reads its whole tree: every copy succeeds and its stream is whole (the
    old walk died on a file shorter than its stat: "unexpected end of data")."""
    made.append("cp-churn")
    churn = (  # files and directories come and go; /churn/big shrinks as it is read
        "mkdir -p /churn; while :; do mkdir -p /churn/d; for i in 1 2 3 4; do"
        " head -c 65536 /dev/zero > /churn/d/f$i; head -c 4194304 /dev/zero > /churn/big;"
        " : > /churn/big; done; rm -rf /churn/d; done"
    )
    out = cli("run", "-d", "--name", "cp-churn", test_image, "sh", "-c", churn)
    assert out.returncode == 0, out.stderr
    wait_for(  # ls fails until the loop has made /churn: not an error, a wait
        lambda: cli("exec", "cp-churn", "ls", "/churn").stdout != "",
        timeout=60,
        what="the churn under way",
    )
    for source in ["cp-churn:/.", "cp-churn:/churn"] * 5:
        got = _members(_cp(cli, source, "-"))
        assert got, source
