"""``scripts/test SUITE``: a contributor's slice collects that suite and nothing else.

Collection only (``--collect-only``): what runs is the suite's own business; what is
checked here is that the slice named is the slice taken, after the same set-up CI does.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("suite", ["unit", "chaos", "nomad"])
def test_a_slice_collects_its_own_suite_only(suite: str) -> None:
    done = subprocess.run(
        ["bash", "scripts/test", suite, "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    assert ids, done.stdout[-2000:]
    strays = [i for i in ids if not i.startswith(f"tests/{suite}/")]
    assert strays == [], strays[:5]
    assert f"== pytest tests/{suite}" in done.stdout
