"""bench/run's targets table: every row of issue 24's target table, with its peer, its
target and a verdict, for the CLI both ways (as installed and in-process)."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def report() -> ModuleType:
    """bench/_report, imported as bench/run does (bench/ on the path)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCH))
        return importlib.import_module("_report")


def results(report: ModuleType, *, pull: bool) -> object:
    """Results whose every sample is 100 (ms or /s) except ctrexec's CLI, at 30."""
    r = report.Results(n=1, group_size=1, burst=50)
    sc = importlib.import_module("_scenarios")
    startup = {f"{m}-{k}": [30.0] for m in sc.CLI_MODES for k in sc.READS}
    startup |= {f"docker-{k}": [100.0] for k in sc.READS}
    startup |= {"ctr-help": [100.0], "ctr-version": [100.0]}
    r.set_startup(startup, {"--help": [], "version": ["grpc"]})
    peers = ("ctr", "docker", "lib", "nomad", "ctr-seccomp")
    for scenario in ("rm", "group1", "group3", "exist", "burst", "nomad"):
        r.samples[scenario] = {k: [100.0] for k in peers}
        r.samples[scenario] |= {m: [30.0] for m in sc.CLI_MODES}
    r.set_restart({"lib": [100.0], "docker": [100.0]}, 1, 1)
    common = importlib.import_module("_common")
    one = common.Mem(count=1, rss=1024, pss=1024, dirty=1024)
    mem = common.MemResult(shims=one, drivers=common.EMPTY, other_shims=0)
    r.mem = dict.fromkeys((*report.MEMORY_LIB, "ctr", "docker"), mem)
    if pull:
        r.samples["pull"] = {"ctrexec": [80.0], "ctr": [100.0]}
        r.pull_image = "4 x 16 MiB"
    return r


def rows_of(report: ModuleType, r: object) -> list[tuple[str, ...]]:
    _header, rows = report.targets(r)
    return list(rows)


def test_every_issue_24_row_is_there_for_both_cli_paths(report: ModuleType) -> None:
    rows = rows_of(report, results(report, pull=True))
    found = {(row[0], row[2], row[5]) for row in rows}
    for how in ("as installed", "`CTREXEC_NO_SERVER=1`"):
        for verb in ("version", "ps -a", "inspect STOPPED", "logs STOPPED"):
            assert (f"CLI `{verb}`, {how}", f"`docker {verb}`", "<= 1.2x") in found
        group = f"CLI `netns create` + `run -d --netns`, {how}"
        assert (group, "docker + pause (pause + 1 joined)", "<= 0.5x") in found
        assert (group, "`ip netns add` + `ctr run -d --with-ns`", "<= 1.5x") in found
        assert (f"CLI `run --rm IMAGE true`, {how}", "`docker run --rm`", "<= 1.0x") in found
        assert (f"CLI `run --rm IMAGE true`, {how}", "`ctr run --rm`", "<= 1.5x") in found
    help_rows = [row for row in rows if row[0].startswith("`ctrexec --help`")]
    assert len(help_rows) == 4  # both paths, against ctr and docker
    assert all(row[5] == "<= 40 ms, no heavy import" and row[6] == "met" for row in help_rows)
    pull = [row for row in rows if row[2] == "`ctr images pull --plain-http`"]
    assert [(r[4], r[5], r[6]) for r in pull] == [("0.80x", "<= 0.9x", "met")]
    burst = [row for row in rows if row[0].startswith("library, 50 groups")]
    assert [(r[2], r[5]) for r in burst] == [
        ("50 parallel `ctr run -d`", ">= 1.4x"),
        ("50 parallel `ctr run -d --seccomp`", "-"),
    ]


def test_a_ratio_row_says_whether_its_target_is_met(report: ModuleType) -> None:
    rows = rows_of(report, results(report, pull=False))
    version = {row[2]: row for row in rows if row[0] == "CLI `version`, as installed"}
    assert version["`docker version`"][4:] == ("0.30x", "<= 1.2x", "met")
    assert version["`ctr version`"][5:] == ("-", "-")  # context, no target
    burst = next(row for row in rows if row[2] == "50 parallel `ctr run -d`")
    assert burst[4:] == ("1.00x", ">= 1.4x", "missed")
    assert not any("pull" in row[0] for row in rows)  # --pull-rounds 0: no row
