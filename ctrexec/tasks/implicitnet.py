"""A ``run -p`` container's own network, as its record's labels describe it.

``ctrexec.groups.implicit`` makes the namespace when ``run`` creates the container; from
then on the record's labels (:data:`~ctrexec.labels.IMPLICIT_GROUP` with the network
settings, the group's name, mode and ports) say everything the tasks' side needs: a destroy or
a rename releases it. A start wires it again as any group member's
(:mod:`ctrexec.tasks.groupnet`). This lives below ``groups/``, so the executor never
reaches up.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ctrexec import labels as lbl
from ctrexec.net import groupns


def release(files_dir: Path, labels: Mapping[str, str]) -> None:
    """Release the network of a record with these labels (a no-op for any other):
    CNI DEL with the settings it was wired with, then its namespace."""
    text = labels.get(lbl.IMPLICIT_GROUP)
    name = labels.get(lbl.GROUP)
    if not text or not name:
        return
    from ctrexec.net import settings  # here, for start-up cost: only such a record loads CNI

    mode = labels.get(lbl.NETWORK_MODE, "bridge")
    groupns.release(settings.from_label(text), files_dir, name, mode)
