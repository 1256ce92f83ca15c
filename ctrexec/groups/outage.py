"""``group up`` cut short by containerd going away: one line that says so.

gRPC words for a daemon that died mid-call ("Stream removed", "Deadline Exceeded",
"Connection reset by peer") name no cause a user can act on, and the rollback of
what ``up`` made needs containerd too. So the error says that containerd went away,
which containers it could not remove, and what to run once it is back: ``group up``
again adopts them (their definition is the same) and finishes the group.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctrexec.containerd.client import Client
from ctrexec.errors import CtrexecError, DeadlineExceeded, Unavailable

#: How long the check that containerd still answers may wait.
PROBE_TIMEOUT = 2.0


def gone(client: Client, exc: CtrexecError) -> bool:
    """Whether ``exc`` came from containerd going away: it says so by its class, or
    containerd does not answer now."""
    if isinstance(exc, Unavailable | DeadlineExceeded):
        return True
    try:
        client.version(timeout=PROBE_TIMEOUT)
    except CtrexecError:
        return True
    return False


def lost(group: str, address: str, left: Sequence[str]) -> Unavailable:
    """The one-line error for a ``group up`` that containerd's going away stopped."""
    kept = f"; could not remove {', '.join(left)}" if left else ""
    return Unavailable(
        f"group {group}: containerd at {address} went away during group up{kept}; "
        "run `ctrexec group up FILE` again once it is back"
    )
