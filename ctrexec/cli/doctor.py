"""``ctrexec doctor``, ``gc``, and docker's ``container prune`` and ``system prune``.

doctor exits 1 when it finds anything (so a cron job or a health check can act on it),
0 when the host is clean; gc exits 1 when something it should remove stays.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from ctrexec.cli._common import (
    ArgumentParser,
    connect,
    connection_flags,
    json_flag,
    print_json,
    print_table,
)

if TYPE_CHECKING:
    from ctrexec.doctor.checks import GcReport
    from ctrexec.doctor.findings import Finding, Scope

#: doctor's exit code when it found something, gc's when a removal failed.
FOUND = 1


def _scope(args: argparse.Namespace) -> Scope:
    from ctrexec.doctor.findings import DEFAULT_GRACE, Scope

    grace = getattr(args, "grace", None)
    return Scope(connect(args), grace=DEFAULT_GRACE if grace is None else grace)


def _since(finding: Finding) -> str:
    from ctrexec.views.ps import human_duration

    if finding.since is None:
        return "-"
    return f"{human_duration(max(0.0, time.time() - finding.since.timestamp()))} ago"


def _rows(findings: list[Finding]) -> list[list[object]]:
    return [[f.kind, f.where, _since(f), f.what, f.fix] for f in findings]


def cmd_doctor(args: argparse.Namespace) -> int:
    from ctrexec.doctor.checks import doctor

    scope = _scope(args)
    with scope.client:
        findings = doctor(scope)
    if args.json:
        print_json([f.to_json() for f in findings], sort_keys=False)
    elif findings:
        print_table(["KIND", "WHERE", "SINCE", "PROBLEM", "FIX"], _rows(findings))
    return FOUND if findings else 0


def _print_gc(report: GcReport, as_json: bool) -> int:
    if as_json:
        print_json(
            {
                "DryRun": report.dry_run,
                "Removed": [f.to_json() for f in report.removed],
                "Failed": [dict(f.finding.to_json(), Reason=f.reason) for f in report.failed],
            },
            sort_keys=False,
        )
    else:
        verb = "would remove" if report.dry_run else "removed"
        for f in report.removed:
            print(f"{verb} {f.kind} {f.where}: {f.what}")
        for failure in report.failed:
            f = failure.finding
            reason = failure.reason
            print(f"ctrexec: could not remove {f.kind} {f.where}: {reason}", file=sys.stderr)
    return FOUND if report.failed else 0


def cmd_gc(args: argparse.Namespace) -> int:
    from ctrexec.doctor.checks import gc

    scope = _scope(args)
    with scope.client:
        report = gc(scope, dry_run=args.dry_run)
    return _print_gc(report, args.json)


def _grace_flag(p: ArgumentParser) -> None:
    p.add_argument(
        "--grace",
        type=float,
        metavar="SECONDS",
        help="how old an unowned object must be to count as garbage (default: 300)",
    )


def register(sub: argparse._SubParsersAction[ArgumentParser]) -> None:
    conn = connection_flags()
    p = sub.add_parser(
        "doctor",
        parents=[conn, json_flag()],
        help="list what ctrexec left behind and what is damaged (changes nothing)",
    )
    _grace_flag(p)
    p.set_defaults(func=cmd_doctor)
    p = sub.add_parser(
        "gc", parents=[conn, json_flag()], help="remove what doctor lists as garbage"
    )
    p.add_argument("--dry-run", action="store_true", help="list what would go; remove nothing")
    _grace_flag(p)
    p.set_defaults(func=cmd_gc)
