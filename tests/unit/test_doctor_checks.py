"""doctor and gc over checks made here: the order, dry runs, damage and failures."""

from __future__ import annotations

from typing import Any

from ctrexec.doctor.checks import doctor, gc
from ctrexec.doctor.findings import Check, Finding, Scope
from ctrexec.errors import CtrexecError, FailedPrecondition

NOW = 1_000_000.0


def _scope(grace: float = 300.0) -> Scope:
    client: Any = object()
    return Scope(client, networks=object(), grace=grace, now=NOW)  # type: ignore[arg-type]


def _store_check(kind: str, store: set[str], log: list[str], garbage: bool = True) -> Check:
    def find(scope: Scope) -> list[Finding]:
        return [
            Finding(kind, name, f"{name} is left", "ctrexec gc", garbage=garbage)
            for name in sorted(store)
        ]

    def remove(scope: Scope, finding: Finding) -> None:
        log.append(f"{kind}:{finding.where}")
        store.discard(finding.where)

    return Check(kind, find, remove)


def test_doctor_lists_every_checks_findings_and_changes_nothing() -> None:
    log: list[str] = []
    a, b = {"x"}, {"y", "z"}
    found = doctor(_scope(), (_store_check("a", a, log), _store_check("b", b, log)))
    assert [(f.kind, f.where) for f in found] == [("a", "x"), ("b", "y"), ("b", "z")]
    assert log == [] and a == {"x"} and b == {"y", "z"}


def test_gc_removes_garbage_in_check_order_and_later_checks_see_it() -> None:
    log: list[str] = []
    containers = {"c1"}
    snapshots = {"s1"}

    def remove_container(scope: Scope, finding: Finding) -> None:
        containers.discard(finding.where)
        snapshots.add("freed-by-c1")  # what the container held is unowned once it goes

    first = Check(
        "container",
        lambda s: [Finding("container", c, "left", "gc") for c in sorted(containers)],
        remove_container,
    )
    report = gc(_scope(), checks=(first, _store_check("snapshot", snapshots, log)))
    assert [f.where for f in report.removed] == ["c1", "freed-by-c1", "s1"]
    assert containers == set() and snapshots == set()
    assert report.failed == [] and not report.dry_run


def test_dry_run_lists_and_removes_nothing() -> None:
    log: list[str] = []
    store = {"x"}
    report = gc(_scope(), dry_run=True, checks=(_store_check("a", store, log),))
    assert [f.where for f in report.removed] == ["x"] and report.dry_run
    assert log == [] and store == {"x"}


def test_gc_leaves_damage_to_its_fix_command() -> None:
    log: list[str] = []
    report = gc(_scope(), checks=(_store_check("pin", {"web"}, log, garbage=False),))
    assert report.removed == [] and log == []


def test_a_failed_removal_is_reported_and_the_rest_go_on() -> None:
    log: list[str] = []

    def refuse(scope: Scope, finding: Finding) -> None:
        raise FailedPrecondition(f"{finding.where} is busy")

    busy = Check("a", lambda s: [Finding("a", "x", "left", "gc")], refuse)
    report = gc(_scope(), checks=(busy, _store_check("b", {"y"}, log)))
    assert [(f.finding.where, f.reason) for f in report.failed] == [("x", "x is busy")]
    assert [f.where for f in report.removed] == ["y"]


def test_a_check_that_cannot_look_is_a_finding_not_a_clean_report() -> None:
    def broken(scope: Scope) -> list[Finding]:
        raise CtrexecError("containerd is gone")

    found = doctor(_scope(), (Check("container", broken),))
    assert len(found) == 1 and not found[0].garbage
    assert "could not check: containerd is gone" in found[0].what


def test_grace_period() -> None:
    scope = _scope(grace=300)
    assert scope.old_enough(NOW - 301) and not scope.old_enough(NOW - 10)
    assert not scope.old_enough(None)
    assert _scope(grace=0).old_enough(None)


def test_json_shape() -> None:
    f = Finding("netns", "/run/netns/cx-x", "no group uses it", "ctrexec gc")
    assert list(f.to_json()) == ["Kind", "Where", "What", "Since", "Fix", "Garbage"]
