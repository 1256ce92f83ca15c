"""scripts/demo end to end, on the session's containerd (the demo runs on the one
``CONTAINERD_ADDRESS`` names), and what it leaves behind: nothing, not even its
containerd namespace, which ``info`` would list and image look-ups would search."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from _cli import TEST_NAMESPACE

from ctrexec.containerd.client import Client

ROOT = Path(__file__).resolve().parents[2]
DEMO_NAMESPACE = f"{TEST_NAMESPACE}-demo"


@pytest.mark.usefixtures("restore_ip_forward")
def test_the_demo_runs_and_removes_its_namespace(containerd_address: str) -> None:
    with Client.connect(containerd_address, namespace=DEMO_NAMESPACE) as c:
        assert DEMO_NAMESPACE not in c.namespaces(), "a namespace the test did not make"
        env = {k: v for k, v in os.environ.items() if k != "CTREXEC_NAMESPACE"}
        env["CONTAINERD_ADDRESS"] = containerd_address
        done = subprocess.run(
            ["bash", str(ROOT / "scripts" / "demo")],
            check=False, capture_output=True, text=True, env=env, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "demo finished" in done.stdout
        # its `ctrexec info` names the containerd it ran on
        # (and why: $CONTAINERD_ADDRESS, as the demo was run)
        shown = rf"^address:\s+{re.escape(containerd_address)} \(from \$CONTAINERD_ADDRESS"
        assert re.search(shown, done.stdout, re.M), done.stdout
        assert "kept" not in done.stderr, done.stderr
        assert DEMO_NAMESPACE not in c.namespaces()
