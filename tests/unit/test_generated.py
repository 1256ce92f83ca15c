"""The committed ctrexec/_api must be exactly what scripts/gen-protos produces."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def test_generated_code_is_up_to_date() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen-protos"), "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, (
        "ctrexec/_api is stale or the generator failed; "
        "run `.venv/bin/python scripts/gen-protos`\n"
        f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
