"""bench/scale's table: every sample a row measures is shown beside its peers, and every
line of the table reads samples that a row makes (a misspelt key would otherwise show up
only at the end of an hour-long run)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def scale() -> ModuleType:
    """bench/scale as a module, imported as it runs (bench/ on the path)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCH))
        loader = importlib.machinery.SourceFileLoader("bench_scale", str(BENCH / "scale"))
        spec = importlib.util.spec_from_loader("bench_scale", loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        return module


def read_keys(scale: ModuleType, n: int) -> list[str]:
    """The keys of the read rows' samples at N, from the commands the row would run."""
    bench = SimpleNamespace(
        cli_conn=lambda: ["--address", "A"],
        cli_env=lambda inproc: {},
        docker=SimpleNamespace(sock=Path("/tmp/d.sock"), env={}),
        address="A",
    )
    s = scale._scale.Scale(b=bench, ctr_client=None, log_dir=Path("/tmp/logs"))
    return list(scale._scale.read_commands(s, n))


@pytest.mark.parametrize("n", [1, 20, 300])
def test_every_sample_is_in_the_table(scale: ModuleType, n: int) -> None:
    m = scale._scale
    results = {
        "reads": {k: [10.0] for k in read_keys(scale, n)},
        "rm": {k: [10.0] for k in m.RM_SIDES},
        "supervised": {k: [10.0] for k in m.SUPERVISED_SIDES},
        "groups": {k: [10.0] for k in m.GROUP_KEYS},
    }
    lines = scale.comparisons(n, results)
    # N, row, ctrexec, peer, peer value, ratio: every value and ratio filled in, but
    # for the rows with no peer (doctor and gc, context)
    for line in lines:
        assert line[0] == str(n)
        assert line[2] == "10 (10)", line
        if line[1] in ("`doctor`", "`gc --dry-run`"):
            assert line[3:] == ("-", "-", "-")
        else:
            assert line[4:] == ("10 (10)", "1.00x"), line
    shown = {line[3] for line in lines}
    for key in results["reads"]:
        if not key.startswith("ctrexec "):
            assert any(key in peer for peer in shown), key
    inspect_many = f"`inspect {min(20, n)}`"
    assert {line[1] for line in lines} >= {"`ps`", "`ps -a`", "`ps -q`", inspect_many}
    for cli in ("docker 28", "docker 20.10"):
        for verb in ("ps", "ps -a", "ps -q", "inspect ONE"):
            assert f"{cli} {verb}" in shown


def test_inspect_of_many_names_n_or_20(scale: ModuleType) -> None:
    """Fewer than 20 containers: the many-names row inspects all of them."""
    assert "ctrexec inspect 5" in read_keys(scale, 5)
    assert "ctrexec inspect 20" in read_keys(scale, 300)
