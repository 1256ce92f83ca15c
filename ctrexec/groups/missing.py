"""Group members whose container is gone: deleted outside ctrexec (``ctr container rm``).

ctrexec removes a member only with its whole group, so a member that the others'
:data:`~ctrexec.labels.GROUP_MEMBERS` label names and that has no record was deleted
by someone else. ``group ps`` shows it as "missing", the supervisor says so once it
sees the record go, and ``group up`` makes it again. Its log and host-files
directories would outlive it (destroy never ran), so whoever finds it gone removes
them: only that id's own in this namespace (:func:`ctrexec.tasks.files.remove_orphaned`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ctrexec import labels as lbl
from ctrexec.containerd import containers
from ctrexec.net import hostfiles
from ctrexec.tasks import files as taskfiles
from ctrexec.tasks.executor import Executor

#: What ``group ps`` says in a missing member's status column.
STATUS = "missing"


def missing(records: Sequence[containers.Container]) -> list[str]:
    """The members the records' labels name that have no record among them, in order."""
    present = {r.id for r in records}
    gone: list[str] = []
    for record in records:
        for member in hostfiles.parse_members(record.labels.get(lbl.GROUP_MEMBERS, "")):
            if member.id not in present and member.id not in gone:
                gone.append(member.id)
    return gone


def report(group: str, member: str) -> str:
    """The one line that says a member is missing and what re-creates it."""
    return (
        f"group {group}: member {member} was deleted outside ctrexec; "
        "run `ctrexec group up FILE` to re-create it"
    )


def remove_files(
    executor: Executor,
    member: str,
    known: Mapping[str, Mapping[str, str]],
    log_roots: Iterable[Path] = (),
) -> list[Path]:
    """Remove a gone member's log and host-files directories; return what was removed.

    They are looked for under the executor's roots, ``log_roots``, and the roots that
    the ``known`` records' labels (record id -> labels: the member's own as last seen,
    or its group's) use for their own files.
    """
    namespace = executor.client.namespace
    roots = [taskfiles.roots_of(labels, namespace, rid) for rid, labels in known.items()]
    return taskfiles.remove_orphaned(
        executor.client,
        member,
        log_roots=[executor.log_dir, *log_roots, *(r[0] for r in roots)],
        files_bases=[executor.files_dir, *(r[1] for r in roots)],
        state_dir=executor.state_dir,
    )
