"""``inspect`` keys docker users' templates read (issue 37: 5), through the real binary."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from _cli import Cli

pytestmark = pytest.mark.integration

NAMES = [f"insd-{n}" for n in range(3)]
WD_IMAGE, WD_BOX = "ctrexec-test/insd-workdir:v1", "insd-wd"
WD_SLASH_IMAGE = "ctrexec-test/insd-workdir:slash"


@pytest.fixture
def made(cli: Cli) -> Iterator[list[str]]:
    names: list[str] = []
    try:
        yield names
    finally:
        with contextlib.suppress(Exception):
            cli("rm", "-f", *names)
        with contextlib.suppress(Exception):
            cli("rmi", WD_IMAGE, WD_SLASH_IMAGE)


def _doc(cli: Cli, name: str) -> dict[str, object]:
    out = cli("inspect", name)
    assert out.returncode == 0, out.stderr
    doc: dict[str, object] = json.loads(out.stdout)[0]
    return doc


def test_working_dir_from_the_image(cli: Cli, test_image: str, made: list[str]) -> None:
    made.append(WD_BOX)
    assert cli("create", "--name", WD_BOX, test_image, "true").returncode == 0
    commit = cli("commit", "--change", "WORKDIR /tmp", WD_BOX, WD_IMAGE)
    assert commit.returncode == 0, commit.stderr
    made.append("insd-wd-run")
    run = cli("run", "--name", "insd-wd-run", WD_IMAGE, "pwd")
    assert (run.returncode, run.stdout) == (0, "/tmp\n"), run.stderr  # the image's, really
    cfg = _doc(cli, "insd-wd-run")["Config"]
    assert isinstance(cfg, dict) and cfg["WorkingDir"] == "/tmp"
    made.append("insd-wd-made")
    assert cli("create", "--name", "insd-wd-made", WD_IMAGE, "pwd").returncode == 0
    cfg = _doc(cli, "insd-wd-made")["Config"]
    assert isinstance(cfg, dict) and cfg["WorkingDir"] == "/tmp"
    made.append("insd-wd-root")
    root = cli("run", "--name", "insd-wd-root", "-w", "/", WD_IMAGE, "pwd")
    assert (root.returncode, root.stdout) == (0, "/\n"), root.stderr
    cfg = _doc(cli, "insd-wd-root")["Config"]
    assert isinstance(cfg, dict) and cfg["WorkingDir"] == "/", cfg["WorkingDir"]
    # An image whose WorkingDir is "/": docker shows "/" (an image with none: "")
    made.append("insd-wd-slash")
    slash = cli("commit", "--change", "WORKDIR /", "insd-wd-run", WD_SLASH_IMAGE)
    assert slash.returncode == 0, slash.stderr
    assert cli("create", "--name", "insd-wd-slash", WD_SLASH_IMAGE, "pwd").returncode == 0
    cfg = _doc(cli, "insd-wd-slash")["Config"]
    assert isinstance(cfg, dict) and cfg["WorkingDir"] == "/", cfg["WorkingDir"]
    plain = _doc(cli, WD_BOX)["Config"]  # the test image's own WorkingDir is "/" too
    assert isinstance(plain, dict) and plain["WorkingDir"] == "/", plain["WorkingDir"]


def test_image_is_the_image_id_and_config_image_the_reference(
    cli: Cli, test_image: str, made: list[str], containerd_address: str
) -> None:
    from _cli import TEST_NAMESPACE

    from ctrexec.containerd import images
    from ctrexec.containerd.client import Client

    with Client.connect(containerd_address, namespace=TEST_NAMESPACE) as client:
        image_id = images.get_image(client, test_image).config_digest  # containerd's word
    assert image_id.startswith("sha256:")
    made.append("insd-img")
    assert cli("create", "--name", "insd-img", test_image, "true").returncode == 0
    out = cli("inspect", "-f", "{{.Image}} {{.Config.Image}}", "insd-img")
    assert (out.returncode, out.stdout) == (0, f"{image_id} {test_image}\n"), out.stderr


def test_mounts_in_docker_s_shape(
    cli: Cli, test_image: str, made: list[str], tmp_path: Path
) -> None:
    host = tmp_path / "host"
    host.mkdir()
    (host / "seen").write_text("from the host\n")
    volume = "insd-vol"
    made.append("insd-mnt")
    try:
        out = cli("run", "-d", "--name", "insd-mnt", "-v", f"{volume}:/data",
                  "-v", f"{host}:/h:ro", "--mount", "type=tmpfs,target=/t",
                  test_image, "sleep", "300")  # fmt: skip
        assert out.returncode == 0, out.stderr
        doc = _doc(cli, "insd-mnt")
        mounts = {m["Destination"]: m for m in doc["Mounts"]}  # type: ignore[attr-defined]
        assert set(mounts) == {"/data", "/h", "/t"}
        shown = cli("volume inspect", volume)
        assert shown.returncode == 0, shown.stderr
        vol = json.loads(shown.stdout)[0]
        assert mounts["/data"] == {
            "Type": "volume", "Name": volume, "Source": vol["Mountpoint"],
            "Destination": "/data", "Driver": "local", "Mode": "", "RW": True,
            "Propagation": "",
        }  # fmt: skip
        assert mounts["/h"] == {
            "Type": "bind", "Source": str(host), "Destination": "/h", "Mode": "",
            "RW": False, "Propagation": "rprivate",
        }  # fmt: skip
        assert (mounts["/t"]["Type"], mounts["/t"]["RW"]) == ("tmpfs", True)
        # The sources are the real ones: what the container writes, the host sees.
        wrote = cli("exec", "insd-mnt", "sh", "-c", "echo hi > /data/f; cat /h/seen")
        assert (wrote.returncode, wrote.stdout) == (0, "from the host\n"), wrote.stderr
        assert (Path(vol["Mountpoint"]) / "f").read_text() == "hi\n"
        tmpl = "{{range .Mounts}}{{.Source}}->{{.Destination}} {{end}}"
        line = cli("inspect", "-f", tmpl, "insd-mnt")
        assert line.returncode == 0, line.stderr
        assert f"{host}->/h" in line.stdout and f"{vol['Mountpoint']}->/data" in line.stdout
    finally:
        cli("rm", "-f", "insd-mnt")
        cli("volume rm", volume)


def test_created_is_never_after_started_at(cli: Cli, test_image: str, made: list[str]) -> None:
    """docker's ``Created`` comes before ``State.StartedAt``. A ``run`` writes its start
    time into the record's create, read before containerd stamps the record, which made
    ``Created`` 1-4 ms the later of the two; a rename stores a new record too."""
    made += ["insd-when", "insd-when2"]
    run = cli("run", "--name", "insd-when", test_image, "true")
    assert run.returncode == 0, run.stderr
    fmt = "{{.Created}} {{.State.StartedAt}}"
    for name in ("insd-when", "insd-when2"):
        out = cli("inspect", "-f", fmt, name)
        assert out.returncode == 0, out.stderr
        created, started = (datetime.fromisoformat(v) for v in out.stdout.split())
        assert created <= started, out.stdout
        if name == "insd-when":
            renamed = cli("rename", "insd-when", "insd-when2")  # a stopped one: a new record
            assert renamed.returncode == 0, renamed.stderr
