"""``ctrexec doctor``, ``gc``, and docker's ``container prune`` and ``system prune``.

doctor exits 1 when it finds anything (so a cron job or a health check can act on it),
0 when the host is clean; gc exits 1 when something it should remove stays. The two
prunes print docker's lines, ask docker's ``[y/N]`` on a terminal without ``-f``
(:mod:`ctrexec.cli.confirm`), and exit 1 when a container could not be removed.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from ctrexec import DEFAULT_LOG_DIR, InvalidArgument
from ctrexec.cli import confirm
from ctrexec.cli._common import (
    ArgumentParser,
    connect,
    connection_flags,
    json_flag,
    print_json,
    print_table,
)

if TYPE_CHECKING:
    from ctrexec import ContainerFilter, ContainerPruneReport, Finding, GcReport, Scope

#: doctor's exit code when it found something, gc's when a removal failed.
FOUND = 1
#: What ``container prune`` says before it asks (docker's words).
CONTAINER_WARNING = "WARNING! This will remove all stopped containers."


def system_warning(*, all_images: bool) -> str:
    """docker's list for ``system prune``, of what ctrexec's removes."""
    images = (
        "all images without at least one container associated to them"
        if all_images
        else "all dangling images"
    )
    return "\n".join(
        (
            "WARNING! This will remove:",
            "  - all stopped containers",
            "  - ctrexec's bridge network if no container uses it",
            f"  - {images}",
            "  - what `ctrexec gc` removes (leftovers no container owns)",
            "",
        )
    )


def _scope(args: argparse.Namespace) -> Scope:
    from pathlib import Path

    import attrs

    from ctrexec import Scope

    grace = getattr(args, "grace", None)
    log_dir = Path(getattr(args, "log_dir", None) or DEFAULT_LOG_DIR)
    scope = Scope(connect(args), log_dir=log_dir)  # the library's grace, unless --grace
    return scope if grace is None else attrs.evolve(scope, grace=grace)


def _since(finding: Finding) -> str:
    from ctrexec.cli.views.durations import human_duration

    if finding.since is None:
        return "-"
    return f"{human_duration(max(0.0, time.time() - finding.since.timestamp()))} ago"


def _rows(findings: list[Finding]) -> list[list[object]]:
    return [[f.kind, f.where, _since(f), f.what, f.fix] for f in findings]


def cmd_doctor(args: argparse.Namespace) -> int:
    from ctrexec import doctor

    scope = _scope(args)
    with scope.client:
        findings = doctor(scope)
    if args.json:
        print_json([f.to_json() for f in findings], sort_keys=False)
    elif findings:
        print_table(["KIND", "WHERE", "SINCE", "PROBLEM", "FIX"], _rows(findings))
    return FOUND if findings else 0


def _gc_json(report: GcReport) -> dict[str, object]:
    return {
        "DryRun": report.dry_run,
        "Removed": [f.to_json() for f in report.removed],
        "Failed": [dict(f.finding.to_json(), Reason=f.reason) for f in report.failed],
        "Spared": [f.to_json() for f in report.spared],
    }


def _print_gc(report: GcReport, as_json: bool) -> int:
    if as_json:
        print_json(_gc_json(report), sort_keys=False)
    else:
        verb = "would remove" if report.dry_run else "removed"
        for f in report.removed:
            print(f"{verb} {f.kind} {f.where}: {f.what}")
        for f in report.spared:  # not ours to judge: the reason ends each one's text
            print(f"spared {f.kind} {f.where}: {f.what}")
        for failure in report.failed:
            f = failure.finding
            reason = failure.reason
            print(f"ctrexec: could not remove {f.kind} {f.where}: {reason}", file=sys.stderr)
    return FOUND if report.failed else 0


def cmd_gc(args: argparse.Namespace) -> int:
    from ctrexec import gc

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
    p.add_argument(
        "--log-dir",
        metavar="DIR",
        help=f"where the tasks' logs are looked for (default: {DEFAULT_LOG_DIR})",
    )


def container_filter(items: list[str]) -> ContainerFilter:
    """docker's ``--filter until=...`` and ``label=...``/``label!=...``."""
    from ctrexec import ContainerFilter
    from ctrexec.cli._time import point_in_time

    until, labels, not_labels = None, [], []
    for item in items:
        key, sep, value = item.partition("=")
        if key == "label!" and sep and value:
            not_labels.append(value)
        elif key == "label" and sep and value:
            labels.append(value)
        elif key == "until" and sep and value:
            try:
                until = point_in_time(value)
            except argparse.ArgumentTypeError as err:
                raise InvalidArgument(f"invalid filter 'until={value}': {err}") from None
        else:
            raise InvalidArgument(f"invalid filter '{item}'")
    return ContainerFilter(until=until, labels=tuple(labels), not_labels=tuple(not_labels))


def _size(n: int) -> str:
    from ctrexec.cli.views.images import human_size

    return human_size(n)


def _print_containers(report: ContainerPruneReport) -> None:
    if report.deleted:
        print("Deleted Containers:")
        for container_id in report.deleted:
            print(container_id)
        print()
    for container_id, reason in report.failed:
        print(f"ctrexec: could not remove {container_id}: {reason}", file=sys.stderr)


def _containers_json(report: ContainerPruneReport) -> dict[str, object]:
    return {
        "ContainersDeleted": list(report.deleted),
        "SpaceReclaimed": report.reclaimed,
        "Failed": [{"ID": i, "Reason": r} for i, r in report.failed],
    }


def cmd_container_prune(args: argparse.Namespace) -> int:
    from ctrexec import prune_containers

    where = container_filter(args.filter)
    if not confirm.confirmed(CONTAINER_WARNING, force=args.force):
        return 0
    scope = _scope(args)
    with scope.client:
        report = prune_containers(scope, where)
    if args.json:
        print_json(_containers_json(report), sort_keys=False)
    else:
        _print_containers(report)
        print(f"Total reclaimed space: {_size(report.reclaimed)}")
    return FOUND if report.failed else 0


def cmd_system_prune(args: argparse.Namespace) -> int:
    from ctrexec import prune_system

    if not confirm.confirmed(system_warning(all_images=args.all), force=args.force):
        return 0
    scope = _scope(args)
    with scope.client:
        report = prune_system(scope, all_images=args.all)
    failed = report.containers.failed or report.leftovers.failed
    if args.json:
        gc_json = _gc_json(report.leftovers)
        doc = {**_containers_json(report.containers), "NetworksDeleted": list(report.networks)}
        doc |= {"ImagesDeleted": list(report.images.deleted), "Leftovers": gc_json}
        print_json(dict(doc, SpaceReclaimed=report.reclaimed), sort_keys=False)
        return FOUND if failed else 0
    _print_containers(report.containers)
    if report.networks:
        print("Deleted Networks:", *report.networks, "", sep="\n")
    if report.images.deleted:
        print("Deleted Images:", *(f"deleted: {n}" for n in report.images.deleted), "", sep="\n")
    if report.leftovers.removed:
        print("Removed leftovers (ctrexec gc):")
    _print_gc(report.leftovers, as_json=False)
    print(f"Total reclaimed space: {_size(report.reclaimed)}")
    return FOUND if failed else 0


def _prune_parsers(sub: argparse._SubParsersAction[ArgumentParser]) -> None:
    conn = connection_flags()
    never_asks = "do not prompt for confirmation (no terminal on stdin: never asks)"
    group = sub.add_parser("container", help="manage containers (prune)")
    group_sub = group.add_subparsers(
        dest="container_command", metavar="COMMAND", parser_class=ArgumentParser
    )
    group_sub.required = True
    p = group_sub.add_parser(
        "prune", parents=[conn, json_flag()], help="remove all stopped containers"
    )
    p.add_argument("--force", "-f", action="store_true", help=never_asks)
    p.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="FILTER",
        help="until=<time|age>, label=<key>[=<value>] or label!=<key>[=<value>]",
    )
    p.set_defaults(func=cmd_container_prune)
    group = sub.add_parser("system", help="manage ctrexec (prune)")
    group_sub = group.add_subparsers(
        dest="system_command", metavar="COMMAND", parser_class=ArgumentParser
    )
    group_sub.required = True
    p = group_sub.add_parser(
        "prune",
        parents=[conn, json_flag()],
        help="remove stopped containers, the unused network, dangling images and gc's garbage",
    )
    p.add_argument("--force", "-f", action="store_true", help=never_asks)
    p.add_argument("--all", "-a", action="store_true", help="all unused images, not just dangling")
    _grace_flag(p)
    p.set_defaults(func=cmd_system_prune)


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
    _prune_parsers(sub)
