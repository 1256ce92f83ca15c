"""Named and anonymous volumes and ``--mount``, through the real ``ctrexec`` binary.

Volumes live under the state directory (``/var/lib/ctrexec/volumes/NAMESPACE``,
private to an isolated run); every test removes its containers and volumes.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import Cli

from ctrexec.testing import wait_for

PREFIX = "vol-"


@pytest.fixture
def vcli(cli: Cli) -> Iterator[Cli]:
    """The CLI; afterwards the tests' containers and every volume of the namespace go."""
    try:
        yield cli
    finally:
        names = cli("ps", "-a", "--format", "{{.Names}}").stdout.split()
        mine = [n for n in names if n.startswith(PREFIX)]
        if mine:
            cli("rm", "-f", "-v", *mine)
        left = cli("volume ls", "-q").stdout.split()
        if left:
            cli("volume rm", "-f", *left)
        assert cli("volume ls", "-q").stdout.split() == []


def _ok(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_create_ls_inspect_rm(vcli: Cli) -> None:
    assert _ok(vcli("volume create", "--label", "tier=db", f"{PREFIX}a")).strip() == "vol-a"
    anon = _ok(vcli("volume create")).strip()
    assert len(anon) == 64 and int(anon, 16) >= 0
    doc = json.loads(_ok(vcli("volume inspect", "vol-a")))[0]
    assert doc["Name"] == "vol-a" and doc["Driver"] == "local" and doc["Scope"] == "local"
    assert doc["Labels"] == {"tier": "db"} and doc["Mountpoint"].endswith("/vol-a/_data")
    assert Path(doc["Mountpoint"]).is_dir()
    table = _ok(vcli("volume ls")).splitlines()
    assert table[0].split() == ["DRIVER", "VOLUME", "NAME"]
    assert sorted(_ok(vcli("volume ls", "-q")).split()) == sorted(["vol-a", anon])
    assert _ok(vcli("volume ls", "-q", "--filter", "label=tier=db")).split() == ["vol-a"]
    assert _ok(vcli("volume ls", "--format", "{{.Name}} {{.Driver}}", "-f", "name=vol-")) == (
        "vol-a local\n"
    )
    missing = vcli("volume inspect", "vol-nope")
    assert missing.returncode == 1 and "get vol-nope: no such volume" in missing.stderr
    assert vcli("volume rm", "vol-nope").returncode == 1
    assert vcli("volume rm", "-f", "vol-nope").returncode == 0
    assert _ok(vcli("volume rm", "vol-a")).strip() == "vol-a"
    assert _ok(vcli("volume ls", "-q")).split() == [anon]


def test_data_survives_the_container_and_is_shared(vcli: Cli, test_image: str) -> None:
    _ok(
        vcli(
            "run",
            "--name",
            "vol-w",
            "-v",
            "vol-d:/data",
            test_image,
            "sh",
            "-c",
            "echo hi >/data/f",
        )
    )
    _ok(vcli("rm", "vol-w"))
    assert _ok(vcli("volume ls", "-q")).split() == ["vol-d"]  # made by -v, kept by rm
    _ok(vcli("run", "-d", "--name", "vol-r1", "-v", "vol-d:/d", test_image, "sleep", "1000"))
    out = vcli("run", "--name", "vol-r2", "--mount", "source=vol-d,target=/d,readonly",
               test_image, "sh", "-c", "cat /d/f; touch /d/g")  # fmt: skip
    assert out.stdout == "hi\n" and out.returncode != 0  # read-only there
    assert _ok(vcli("exec", "vol-r1", "cat", "/d/f")) == "hi\n"
    used = vcli("volume rm", "vol-d")
    assert used.returncode == 1
    assert "remove vol-d: volume is in use - [" in used.stderr and "vol-r1" in used.stderr
    assert _ok(vcli("volume ls", "-q", "--filter", "dangling=true")).split() == []
    _ok(vcli("rm", "-f", "vol-r1", "vol-r2"))
    assert _ok(vcli("volume ls", "-q", "--filter", "dangling=true")).split() == ["vol-d"]
    _ok(vcli("volume rm", "vol-d"))


def test_anonymous_volumes_rm_v_and_prune(vcli: Cli, test_image: str) -> None:
    _ok(vcli("run", "--name", "vol-a1", "-v", "/cache", "-v", "vol-kept:/k", test_image, "true"))
    (anon,) = set(_ok(vcli("volume ls", "-q")).split()) - {"vol-kept"}
    _ok(vcli("run", "--name", "vol-a2", "--mount", "type=volume,dst=/c", test_image, "true"))
    after = set(_ok(vcli("volume ls", "-q")).split())
    (anon2,) = after - {"vol-kept", anon}
    _ok(vcli("rm", "-v", "vol-a1"))  # its anonymous volume goes, the named one stays
    assert set(_ok(vcli("volume ls", "-q")).split()) == {"vol-kept", anon2}
    assert _ok(vcli("volume prune", "-f")) == "Total reclaimed space: 0B\n"  # vol-a2 uses it
    _ok(vcli("rm", "vol-a2"))  # without -v its anonymous volume stays, as docker's
    pruned = _ok(vcli("volume prune", "-f"))
    assert pruned == f"Deleted Volumes:\n{anon2}\n\nTotal reclaimed space: 0B\n"
    assert _ok(vcli("volume ls", "-q")).split() == ["vol-kept"]  # prune keeps named ones
    assert anon2 not in _ok(vcli("volume prune", "-f", "-a"))
    assert _ok(vcli("volume ls", "-q")).split() == []


def test_run_rm_removes_anonymous_volumes(vcli: Cli, test_image: str) -> None:
    out = vcli("run", "--rm", "--name", "vol-rm", "-v", "/x", "-v", "vol-n:/n", test_image,
               "sh", "-c", "echo ok >/x/f")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert _ok(vcli("volume ls", "-q")).split() == ["vol-n"]


def test_mount_bind_and_tmpfs(vcli: Cli, test_image: str, tmp_path: Path) -> None:
    (tmp_path / "in").write_text("from the host\n")
    out = vcli("run", "--rm", "--name", "vol-m",
               "--mount", f"type=bind,src={tmp_path},dst=/h,readonly",
               "--mount", "type=tmpfs,destination=/t,tmpfs-size=1m",
               test_image, "sh", "-c", "cat /h/in; grep ' /t ' /proc/mounts; touch /h/x")  # fmt: skip
    assert out.stdout.startswith("from the host\ntmpfs /t tmpfs "), out.stderr
    assert "size=1024k" in out.stdout and out.returncode != 0
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("mount", "message"),
    [
        ("type=bind,source=/vol-absent,target=/x", "bind source path does not exist: /vol-absent"),
        ("type=bind,source=/tmp", "target is required"),
        ("type=bind,src=/tmp,dst=/x,bogus", "invalid field 'bogus' must be a key=value pair"),
        ("type=bind,src=/tmp,dst=/x,colour=red", "unexpected key 'colour' in 'colour=red'"),
        ("type=tmpfs,src=/tmp,dst=/x", 'invalid mount config for type "tmpfs"'),
        ("type=volume,src=a b,dst=/x", "invalid characters for a local volume name"),
    ],
)
def test_mount_errors(vcli: Cli, test_image: str, mount: str, message: str) -> None:
    out = vcli("run", "--rm", "--name", "vol-bad", "--mount", mount, test_image, "true")
    assert out.returncode == 125 and message in out.stderr, out.stderr
    assert "--mount" in out.stderr


def test_copy_up_fills_an_empty_volume_once(vcli: Cli, test_image: str) -> None:
    """docker's copy-up: the image's files at the mount point go into an empty volume
    (owner and mode too), not into one that has files, nor with nocopy."""
    out = vcli("run", "--rm", "--name", "vol-cu1", "-v", "vol-www:/var/www",
               "-v", "vol-home:/home/app", test_image,
               "sh", "-c", "ls /var/www; stat -c '%u:%g %a' /home/app; echo new >/var/www/index.html")  # fmt: skip
    assert out.stdout == "index.html\n1000:1000 755\n", out.stderr
    doc = json.loads(_ok(vcli("volume inspect", "vol-www")))[0]
    assert (Path(doc["Mountpoint"]) / "index.html").read_text() == "new\n"
    out = vcli("run", "--rm", "--name", "vol-cu2", "-v", "vol-www:/var/www", test_image,
               "cat", "/var/www/index.html")  # fmt: skip
    assert out.stdout == "new\n", out.stderr  # the volume's files, not the image's again
    out = vcli("run", "--rm", "--name", "vol-cu3", "--mount", "src=vol-nc,dst=/var/www,volume-nocopy",
               test_image, "ls", "-A", "/var/www")  # fmt: skip
    assert out.returncode == 0 and out.stdout == "", out.stderr


def test_group_file_members_share_a_volume(vcli: Cli, test_image: str, tmp_path: Path) -> None:
    """``volumes`` and ``mounts`` in a group file: the same parser as ``-v``/``--mount``."""
    path = tmp_path / "g.toml"
    path.write_text(
        'name = "vol-g"\nnetwork = "none"\n'
        f'[[task]]\nname = "w"\nimage = "{test_image}"\nvolumes = ["vol-gd:/shared"]\n'
        'command = ["sh", "-c", "echo g >/shared/f; exec sleep 1000"]\n'
        f'[[task]]\nname = "r"\nimage = "{test_image}"\ncommand = ["sleep", "1000"]\n'
        'mounts = ["type=volume,source=vol-gd,target=/s,readonly"]\n'
    )
    try:
        _ok(vcli("group up", str(path)))
        wait_for(
            lambda: vcli("exec", "vol-g-r", "cat", "/s/f").stdout == "g\n",
            timeout=60,
            interval=0.5,
            what="the writer's file, read by the other member",
        )
        assert vcli("volume rm", "vol-gd").returncode == 1
    finally:
        vcli("group down", "-t", "1", "vol-g")
    _ok(vcli("volume rm", "vol-gd"))
