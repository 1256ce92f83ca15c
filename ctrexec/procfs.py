"""Reading a process's files under /proc: the one parser of each.

Several layers ask the same questions of a pid (is it alive or a zombie, who is its
parent, which cgroup holds it), from the shim scans that run over every process on the
host to the wait for a helper to reach its scope. Each file's format has traps (a
command name may hold ")" and spaces; a v1 line may name several controllers), so each
is parsed here once. Nothing here imports ctrexec: every layer may use it.
"""

from __future__ import annotations


def split_proc_stat(data: bytes) -> tuple[str, list[str]] | None:
    """``/proc/PID/stat``'s text as (comm, the fields after it): the one parser of that file.

    comm sits in parentheses and may itself hold spaces and parentheses, so the fields
    start after the *last* ")". The list is indexed from the state letter: ``[0]`` is
    the state, ``[1]`` the parent's pid, ``[11]``/``[12]`` utime/stime (proc(5)'s field
    number minus 3).
    """
    head, sep, tail = data.rpartition(b")")
    fields = tail.decode("ascii", "replace").split()
    if not sep or not fields:
        return None
    return head.partition(b"(")[2].decode(errors="replace"), fields


def proc_stat(pid: int | str) -> tuple[str, list[str]] | None:
    """:func:`split_proc_stat` of a process, None once it is gone.

    Plain ``open`` rather than ``pathlib``: callers run this over every process on the
    host, where pathlib costs three times as much.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:  # noqa: PTH123
            return split_proc_stat(f.read())
    except OSError:
        return None


def process_alive(pid: int) -> bool:
    """Whether ``pid`` still runs. A zombie has exited: its parent has just not reaped
    it yet, and a signal to it does nothing."""
    stat = proc_stat(pid)
    return stat is not None and stat[1][0] != "Z"


def split_proc_cgroup(text: str) -> dict[str, str]:
    """``/proc/PID/cgroup``'s text as {controller: path}, the unified (v2) hierarchy under
    ``""``; a v1 line naming several controllers gives each of them. The one parser of
    that file."""
    paths = {}
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def proc_cgroups(pid: int | str) -> dict[str, str] | None:
    """:func:`split_proc_cgroup` of a process, None once it is gone."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:  # noqa: PTH123
            return split_proc_cgroup(f.read())
    except OSError:
        return None
