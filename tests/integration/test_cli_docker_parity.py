"""Where ctrexec's verbs answer as docker's do, through the real binary: ``wait`` of a
container never started, the exit code of a missing container, ``stats``' CPU %."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from _cli import Cli

from ctrexec.testing import wait_for

pytestmark = pytest.mark.integration


def test_wait_of_a_created_container_waits_for_its_start_and_exit(
    cli: Cli, test_image: str, made: list[str]
) -> None:
    made.append("dp-later")
    out = cli("create", "--name", "dp-later", test_image, "sh", "-c", "exit 7")
    assert out.returncode == 0, out.stderr
    argv = cli.argv("wait", "dp-later")
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.poll() is None  # nothing to report before a start
            start = cli("start", "dp-later")
            assert start.returncode == 0, start.stderr
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert (proc.returncode, stdout, stderr) == (0, "7\n", "")


def test_wait_of_a_created_container_ends_when_it_is_removed(
    cli: Cli, test_image: str, made: list[str]
) -> None:
    made.append("dp-never")
    out = cli("create", "--name", "dp-never", test_image, "true")
    assert out.returncode == 0, out.stderr
    argv = cli.argv("wait", "dp-never")
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert cli("rm", "dp-never").returncode == 0
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert (proc.returncode, stdout, stderr) == (1, "", "ctrexec: No such container: dp-never\n")


@pytest.mark.parametrize(
    "argv",
    [
        ["logs"],
        ["top"],
        ["port"],
        ["exec", "--", "NAME", "true"],
        ["inspect"],
        ["inspect", "-f", "{{.Id}}"],
        ["wait"],
        ["stats", "--no-stream"],
        ["attach"],
        ["rename", "NAME", "dp-new"],
    ],
)
def test_a_missing_container_exits_1(cli: Cli, argv: list[str]) -> None:
    verb, *rest = argv
    args = (
        [a.replace("NAME", "dp-nosuch") for a in rest] if "NAME" in rest else [*rest, "dp-nosuch"]
    )
    out = cli(verb, *args)
    assert (out.returncode, out.stdout.strip() in ("", "[]"), out.stderr) == (
        1,
        True,
        "ctrexec: No such container: dp-nosuch\n",
    )


def _cpu_column(out: subprocess.CompletedProcess[str], name: str) -> float:
    """The CPU % of ``name`` in a stats table (columns are three spaces apart)."""
    assert out.returncode == 0, out.stderr
    header, *rows = (re.split(r"\s{3,}", line) for line in out.stdout.splitlines())
    assert header == [
        "NAME", "CPU %", "MEM USAGE / LIMIT", "MEM %", "NET I/O", "BLOCK I/O", "PIDS",
    ]  # fmt: skip
    (row,) = (r for r in rows if r[0] == name)
    assert re.fullmatch(r"\d+\.\d\d%", row[1]), row
    return float(row[1].rstrip("%"))


def test_stats_shows_cpu_percent(cli: Cli, test_image: str, made: list[str]) -> None:
    made += ["dp-idle", "dp-busy"]
    for name, script in (("dp-idle", "sleep 300"), ("dp-busy", "while :; do :; done")):
        out = cli("run", "-d", "--name", name, test_image, "sh", "-c", script)
        assert out.returncode == 0, out.stderr
    idle = cli("stats", "--no-stream", "--interval", "0.3", "dp-idle")
    assert _cpu_column(idle, "dp-idle") >= 0
    busy: list[float] = []

    def spinning() -> bool:
        out = cli("stats", "--no-stream", "--interval", "0.3", "dp-busy")
        busy.append(_cpu_column(out, "dp-busy"))
        return busy[-1] > 0

    wait_for(spinning, timeout=60, what="the busy loop's CPU %")
    data = json.loads(cli("stats", "--no-stream", "--json", "--interval", "0.3", "dp-idle").stdout)
    assert isinstance(data["dp-idle"]["cpu_percent"], float)


def test_inspect_prints_those_it_found(cli: Cli, test_image: str, made: list[str]) -> None:
    made += ["dp-a", "dp-b"]
    for name in made:
        assert cli("create", "--name", name, test_image, "true").returncode == 0
    out = cli("inspect", "dp-a", "dp-nosuch", "dp-b")
    assert out.returncode == 1
    assert [i["Id"] for i in json.loads(out.stdout)] == ["dp-a", "dp-b"]
    assert out.stderr == "ctrexec: No such container: dp-nosuch\n"


def test_a_missing_image_says_how_to_get_it(cli: Cli, tmp_path: Path) -> None:
    ref = "ctrexec-nope-nope:v0"
    group = tmp_path / "g.toml"
    group.write_text(
        'name = "dpimg"\nnetwork = "none"\n[[task]]\nname = "t"\n'
        f'image = "{ref}"\ncommand = ["true"]\n'
    )
    for argv in (
        ["run", "--pull", "never", "--name", "dp-img", ref],
        ["create", "--pull", "never", "--name", "dp-img", ref],
        ["group up", "--pull", "never", str(group)],
    ):
        verb, *rest = argv
        out = cli(verb, *rest)
        assert out.returncode == 125, argv
        assert out.stderr.count("\n") == 1, out.stderr
        assert out.stderr.startswith(f"ctrexec: image {ref!r} not found in namespace"), argv
        assert out.stderr.endswith(f"; get it with: ctrexec pull {ref}\n"), argv
    assert "dp-img" not in cli("ps", "-a").stdout
    assert not Path("/run/netns/dpimg").exists()
