"""Fixtures of the integration tests: the network harness's (``_nethelpers``, used by
``NET_MARKS``) and the CLI tests' record of what they made."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import Cli
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


@pytest.fixture
def made(cli: Cli) -> Iterator[list[str]]:
    """Names a CLI test created; each is removed (forced) afterwards, even if it failed."""
    names: list[str] = []
    yield names
    if names:
        with contextlib.suppress(Exception):
            cli("rm", "-f", *names)
