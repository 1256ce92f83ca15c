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

import attrs

from ctrexec import labels as lbl
from ctrexec.containerd import containers
from ctrexec.containerd.client import Client
from ctrexec.defaults import DEFAULT_LOG_DIR, RUN_DIR
from ctrexec.net import settings as net_settings
from ctrexec.net.networks import Networks

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


@attrs.frozen
class Scope:
    """Where doctor looks: one containerd namespace's objects, and the host's state
    that ctrexec keeps for every namespace (pins, CNI's cache and IPAM, host files).

    ``now`` is fixed at the start, so one run judges every object's age alike.
    """

    client: Client
    networks: Networks = attrs.field(factory=net_settings.from_env)
    log_dir: Path = Path(DEFAULT_LOG_DIR)
    state_dir: Path = Path(RUN_DIR)
    grace: float = DEFAULT_GRACE
    now: float = attrs.field(factory=time.time)

    @property
    def namespace(self) -> str:
        return self.client.namespace

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
    are ``containers.list_containers(scope.client, ...)``.
    """
    managed = containers.label_filter(lbl.MANAGED)
    return [
        (ns, record)
        for ns in scope.client.namespaces()
        for record in containers.list_containers(scope.client.with_namespace(ns), managed)
    ]


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
