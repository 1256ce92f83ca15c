"""Which containers the Nomad driver owns: its labels, written and read in one place.

The driver marks each container with Nomad's task id, allocation and task name so that
it finds what it owns after a restart (RecoverTask) and removes what no allocation
claims (the dangling-container sweep). The label keys are the library's
(:mod:`ctrexec.labels`: doctor, prune and rename read them too); a front end that
starts tasks for Nomad uses these calls instead of spelling the keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import attrs

from ctrexec import labels as lbl

if TYPE_CHECKING:
    from ctrexec.containerd.client import Client


@attrs.frozen
class NomadTask:
    """A container the Nomad driver started: its id, Nomad's names for it and its age
    (``created_at`` None when containerd did not say)."""

    container_id: str
    task_id: str
    alloc_id: str
    task_name: str
    created_at: datetime | None


def nomad_labels(
    task_id: str, alloc_id: str, task_name: str, addresses: Sequence[str] = ()
) -> dict[str, str]:
    """The labels that make a task the Nomad driver's (for ``TaskConfig.labels``), with
    the allocation namespace's ``addresses``, which the task's own /etc/hosts line
    names (Nomad wired that namespace, so ctrexec cannot know them otherwise)."""
    labels = {
        lbl.NOMAD_TASK_ID: task_id,
        lbl.NOMAD_ALLOC_ID: alloc_id,
        lbl.NOMAD_TASK_NAME: task_name,
    }
    if addresses:
        labels[lbl.ADDRESSES] = ",".join(addresses)
    return labels


def nomad_task_id(labels: Mapping[str, str]) -> str | None:
    """Nomad's task id in a task's labels (``TaskInfo.labels``); None: not Nomad's."""
    return labels.get(lbl.NOMAD_TASK_ID)


def nomad_tasks(client: Client) -> list[NomadTask]:
    """Every container of the client's namespace that the Nomad driver started, in one
    listing (no per-task state: the dangling sweep asks this every period)."""
    # Imported here for start-up cost: the Nomad plugin labels at start, lists later.
    from ctrexec.containerd import containers

    return [
        NomadTask(
            container_id=c.id,
            task_id=c.labels[lbl.NOMAD_TASK_ID],
            alloc_id=c.labels.get(lbl.NOMAD_ALLOC_ID, ""),
            task_name=c.labels.get(lbl.NOMAD_TASK_NAME, ""),
            created_at=c.created_at,
        )
        for c in containers.list_containers(client)
        if lbl.NOMAD_TASK_ID in c.labels
    ]
