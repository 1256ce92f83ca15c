"""Whether a process of the host has ended, read from /proc: one reading for every suite.

A process the test did not start cannot be waited for; it counts as ended once /proc
has no entry for it or names it a zombie (ended, not yet reaped by its parent) or dead.
"""

from __future__ import annotations

from pathlib import Path


def gone(pid: int) -> bool:
    """True once ``pid`` has ended (absent, zombie or dead)."""
    try:
        # The state follows the command, which may itself contain ") ".
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")
