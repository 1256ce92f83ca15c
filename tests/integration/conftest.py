"""Fixtures of the network tests' harness (``_nethelpers``), used by ``NET_MARKS``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _nethelpers import IP_FORWARD, RUN_TAG, iptables_dump, sh


@pytest.fixture(scope="module")
def restore_ip_forward() -> Iterator[None]:
    """The bridge plugin (isGateway) turns net.ipv4.ip_forward on; undo that, and
    check at the module's end that nothing named after the run is left."""
    before = IP_FORWARD.read_text()
    yield
    IP_FORWARD.write_text(before)
    assert [p.name for p in Path("/run/netns").glob(f"{RUN_TAG}*")] == []
    assert RUN_TAG not in iptables_dump()
    assert RUN_TAG not in sh("ip", "-o", "link").stdout
