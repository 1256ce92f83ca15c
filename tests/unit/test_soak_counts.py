"""bench/soak's pure helpers: what counts as the soak's own, and when a count is back."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

SAVE = r"""*nat
:POSTROUTING ACCEPT [0:0]
:CNI-aaa111 - [0:0]
:CNI-bbb222 - [0:0]
-A POSTROUTING -s 10.231.215.2/32 -m comment --comment "name: \"soak\" id: \"x\"" -j CNI-aaa111
-A POSTROUTING -s 10.231.9.2/32 -m comment --comment "name: \"other\" id: \"y\"" -j CNI-bbb222
-A CNI-aaa111 -d 10.231.215.0/24 -m comment --comment "name: \"soak\" id: \"x\"" -j ACCEPT
-A CNI-aaa111 ! -d 224.0.0.0/4 -j MASQUERADE
-A CNI-bbb222 ! -d 224.0.0.0/4 -j MASQUERADE
COMMIT
"""


@pytest.fixture(scope="module")
def sc() -> ModuleType:
    """bench/_soakcount, imported as bench/soak does (bench/ on the path)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCH))
        return importlib.import_module("_soakcount")


def test_iptables_counts_the_networks_lines_and_the_chains_they_jump_to(sc: ModuleType) -> None:
    # Ours: the POSTROUTING jump, its chain's declaration and both of its rules;
    # the other network's chain and rules are left out.
    assert sc.iptables_count(SAVE, "10.231.215.", "soak") == 4
    assert sc.iptables_count(SAVE, "10.231.216.", "none") == 0


def test_ipam_counts_addresses_not_bookkeeping(sc: ModuleType) -> None:
    names = ["10.231.215.2", "10.231.215.3", "fd00::3", "last_reserved_ip.0", "lock"]
    assert sc.ipam_entries(names) == 3


def test_exact_counts_must_return_and_gauges_get_slack(sc: ModuleType) -> None:
    start = {"containers": 0, "fds": 10, "logd_rss_kib": 100_000}
    assert sc.compare(start, {"containers": 0, "fds": 10, "logd_rss_kib": 110_000}) == []
    assert sc.compare(start, {"containers": 1, "fds": 11, "logd_rss_kib": 200_000}) == [
        "containers",
        "fds",
        "logd_rss_kib",
    ]
    assert sc.compare(start, {"fds": 10, "logd_rss_kib": 1}) == ["containers"]  # unread


def test_table_marks_what_did_not_return(sc: ModuleType) -> None:
    text = sc.table([("p", {"shims": 0, "fds": 10}, {"shims": 5}, {"shims": 1, "fds": 10})])
    lines = {line.split(" | ")[0]: line for line in text.splitlines()}
    assert lines["| shims"] == "| shims | 0 | 5 | 1 ! |"
    assert lines["| fds"] == "| fds | 10 | - | 10 |"
