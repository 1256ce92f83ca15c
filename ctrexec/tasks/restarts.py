"""Whether a task's restart policy starts it again, from its container's labels alone.

One rule for the supervisor, which acts on it, and for ``TaskInfo.done``, which a
scheduler waits on: a scheduler that re-derived docker's rule (``on-failure`` and a
0 exit, the attempts left, a stop by hand) would drift from what the supervisor does.
"""

from __future__ import annotations

from collections.abc import Mapping

from ctrexec import labels as lbl


def should_restart(labels: Mapping[str, str], exit_code: int) -> bool:
    """The policy decision for one exit, from the container's labels alone."""
    policy = labels.get(lbl.RESTART_POLICY, "no")
    if policy == "no" or labels.get(lbl.STOPPED_BY_USER) == "true":
        return False
    if policy == "on-failure" and exit_code == 0:
        return False
    max_attempts = int(labels.get(lbl.RESTART_MAX, "0") or 0)
    count = int(labels.get(lbl.RESTART_COUNT, "0") or 0)
    return not (max_attempts > 0 and count >= max_attempts)


def should_revive(labels: Mapping[str, str]) -> bool:
    """The policy decision for a task the host's restart took away (no exit was seen),
    as dockerd's at its start: ``always`` comes back even when it was stopped by hand,
    ``unless-stopped`` and ``on-failure`` unless it was."""
    policy = labels.get(lbl.RESTART_POLICY, "no")
    if policy == "no" or labels.get(lbl.AUTO_REMOVE) == "true":
        return False
    return policy == "always" or labels.get(lbl.STOPPED_BY_USER) != "true"
