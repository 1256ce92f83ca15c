"""What doctor reports, where it looks, and the shape of one check.

A :class:`Finding` is one row of ``ctrexec doctor``: what was found, where, since when,
and the command that fixes it. ``garbage`` findings are what ``gc`` removes; the others
(damage, a nearly full disk) need the command their row names, or a person.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar, cast

import attrs

from ctrexec import labels as lbl
from ctrexec.containerd import containers
from ctrexec.containerd.client import Client
from ctrexec.defaults import DEFAULT_LOG_DIR, RUN_DIR
from ctrexec.net import settings as net_settings
from ctrexec.net.networks import Networks

_T = TypeVar("_T")

#: How old an unowned object must be before it is garbage: a create in flight (a
#: container whose task is being made, a namespace being wired) looks unowned for a
#: moment. docker's prune has no such bound; its objects have no in-flight state.
DEFAULT_GRACE = 300.0


@attrs.frozen
class Finding:
    """One leftover or one piece of damage.

    ``kind`` is the check's name (``container``, ``netns``, ...); ``where`` names the
    object as a user would find it (an id, a path, a link, a rule); ``ref`` is what the
    check's remover needs when that is not ``where`` (a full path, a rule's text).
    """

    kind: str
    where: str
    what: str
    fix: str
    since: datetime | None = None
    garbage: bool = True
    ref: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "Kind": self.kind,
            "Where": self.where,
            "What": self.what,
            "Since": self.since.isoformat() if self.since else None,
            "Fix": self.fix,
            "Garbage": self.garbage,
        }


@attrs.define
class _Memo:
    """What the checks of one run share, each made at its first use (see Scope)."""

    records: list[containers.Container] | None = None
    every: list[tuple[str, containers.Container]] | None = None
    made: dict[Callable[[], object], object] = attrs.field(factory=dict)

    def clear(self) -> None:
        self.records = self.every = None
        self.made.clear()


@attrs.frozen
class Scope:
    """Where doctor looks: one containerd namespace's objects, and the host's state
    that ctrexec keeps for every namespace (pins, CNI's cache and IPAM, host files).

    ``now`` is fixed at the start, so one run judges every object's age alike. For the
    same reason, and because a listing of N containers per check made a run of ~17
    checks cost 17 listings (issue 40), the namespace's records, every namespace's
    ctrexec records and the host's processes are read once, at their first use, and
    shared by the run's checks. A listing shared this way can only be older than one a
    check would have made: a record removed since still shows (an object looks owned,
    and stays), and one created since is missing, as it would be for a record created
    just after a check's own listing; the grace period covers that. Whatever removes
    something calls :meth:`forget` (gc does, around each removal), so a remover judges
    afresh and the next check sees the removal.
    """

    client: Client
    networks: Networks = attrs.field(factory=net_settings.from_env)
    log_dir: Path = Path(DEFAULT_LOG_DIR)
    state_dir: Path = Path(RUN_DIR)
    grace: float = DEFAULT_GRACE
    now: float = attrs.field(factory=time.time)
    _memo: _Memo = attrs.field(factory=_Memo, init=False, repr=False, eq=False)

    @property
    def namespace(self) -> str:
        return self.client.namespace

    def records(self) -> list[containers.Container]:
        """Every container record of the scope's namespace, ctrexec's or not."""
        if self._memo.records is None:
            self._memo.records = containers.list_containers(self.client)
        return self._memo.records

    def managed(self) -> list[containers.Container]:
        """ctrexec's records of the namespace: those that carry the managed label, with
        any value, as containerd's ``labels."io.ctrexec.managed"`` filter (a presence
        test) would list them; taken from :meth:`records` rather than a second List."""
        return [r for r in self.records() if lbl.MANAGED in r.labels]

    def shared(self, make: Callable[[], _T]) -> _T:
        """``make()``, called once per run and kept (the host's process table: a scan
        of /proc that each shim check would otherwise repeat)."""
        if make not in self._memo.made:
            self._memo.made[make] = make()
        return cast("_T", self._memo.made[make])

    def forget(self) -> None:
        """Drop what the run shares, so the next use reads the host and the daemon
        again: called after a removal (see the class docstring)."""
        self._memo.clear()

    def every_record(self) -> list[tuple[str, containers.Container]]:
        """:func:`every_record`, listed once per run (see the class docstring); the
        scope's own namespace is not listed a second time."""
        if self._memo.every is None:
            managed = containers.label_filter(lbl.MANAGED)
            self._memo.every = [
                (ns, record)
                for ns in self.client.namespaces()
                for record in (
                    self.managed()
                    if ns == self.namespace
                    else containers.list_containers(self.client.with_namespace(ns), managed)
                )
            ]
        return self._memo.every

    def old_enough(self, since: datetime | float | None) -> bool:
        """Past the grace period; an object of unknown age is old enough only when the
        grace period is zero (an operator's ``gc --grace 0``)."""
        if since is None:
            return self.grace <= 0
        stamp = since.timestamp() if isinstance(since, datetime) else since
        return self.now - stamp >= self.grace


def every_record(scope: Scope) -> list[tuple[str, containers.Container]]:
    """ctrexec's containers in *every* containerd namespace of the daemon.

    The host's state (pins, addresses, CNI's cache, host files) is shared by all of
    them: a namespace pin is unowned only if no record in any namespace names it.
    Each comes with its containerd namespace. Records of the scope's namespace alone
    are :meth:`Scope.managed`.
    """
    return scope.every_record()


def stamp(seconds: float | None) -> datetime | None:
    """A file's or object's time (seconds since the epoch) as a finding's ``since``."""
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


@attrs.frozen
class Check:
    """One kind of leftover: how to find it, how to remove one.

    ``find`` lists findings (garbage and damage alike); ``remove`` is called by gc for
    each garbage finding ``find`` just returned, and raises a CtrexecError when it
    cannot. A check with nothing to remove (damage only) leaves ``remove`` None.
    """

    kind: str
    find: Callable[[Scope], list[Finding]]
    remove: Callable[[Scope, Finding], None] | None = None
