"""The undamaged group that issue 20's scenarios start from is sound, and leaves nothing.

If this fails, the scenario tests' checks (tests/chaos/_integrity.py) are wrong, not
the repairs they test.
"""

from __future__ import annotations

import subprocess

from _integrity import Bridged


def test_the_undamaged_group_is_sound_and_goes_without_a_trace(bridged: Bridged) -> None:
    g = bridged
    g.up()
    g.wait_sound()
    pids = g.member_pids()
    assert set(pids) == {"srv", "cli"}
    assert len(set(g.namespaces().values())) == 1
    g.down_clean()


def test_a_second_holder_of_the_address_is_seen_by_arping(bridged: Bridged) -> None:
    """The duplicate check itself: a namespace of the test's own that takes the group's
    address on the same bridge makes arping see two MACs."""
    g = bridged
    g.up()
    g.wait_sound()
    address = g.group_address()
    assert address is not None
    ns, host, peer = "cxpdup", "cxpdupa", "cxpdupb"
    try:
        for argv in (
            ["ip", "netns", "add", ns],
            ["ip", "link", "add", host, "type", "veth", "peer", "name", peer],
            ["ip", "link", "set", peer, "netns", ns],
            ["ip", "link", "set", host, "master", g.bridge, "up"],
            ["ip", "-n", ns, "addr", "add", f"{address}/24", "dev", peer],
            ["ip", "-n", ns, "link", "set", peer, "up"],
        ):
            subprocess.run(argv, check=True, capture_output=True)
        assert len(g.arping(address)) == 2
    finally:
        subprocess.run(["ip", "link", "del", host], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
    g.down_clean()
