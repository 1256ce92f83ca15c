"""``ps`` and ``inspect``: docker's columns, filters, document and Go templates
(see ctrexec.cli.views.ps and ctrexec.cli.views.inspect)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from ctrexec.cli._common import (
    ArgumentParser,
    connect,
    connection_flags,
    json_flag,
    print_json,
    resolver,
)
from ctrexec.cli.verbs import each

if TYPE_CHECKING:
    from ctrexec import TaskInfo
    from ctrexec.cli.views.gotemplate import Template


def cmd_ps(args: argparse.Namespace) -> int:
    from ctrexec import list_tasks
    from ctrexec.cli.views import inspect as inspectdoc
    from ctrexec.cli.views import ps as psformat

    filters = psformat.parse_filters(args.filter)  # before connecting: a typo starts nothing
    if args.format:
        psformat.ps_template(args.format)  # bad templates and fields are refused with no row
    last = 1 if args.latest else args.last
    # Not the Executor, whose modules (exec, streams, net, spec) a listing never uses.
    with connect(args) as client:
        infos = list_tasks(client, all_tasks=args.all or last is not None)
    infos = [i for i in infos if psformat.matches(i, filters)]
    infos.sort(key=_created, reverse=True)  # newest first, as docker lists
    if last is not None:
        infos = infos[:last]
    if args.json:
        print_json([inspectdoc.ctrexec_view(i) for i in infos])
        return 0
    template = "{{.ID}}" if args.quiet else args.format or psformat.PS_DEFAULT
    for line in psformat.ps_lines(infos, template, trunc=not args.no_trunc):
        print(line)
    for line in psformat.problem_lines(infos):  # on stderr: scripts read stdout
        print(line, file=sys.stderr)
    return 0


def _created(info: TaskInfo) -> float:
    return info.created_at.timestamp() if info.created_at else 0.0


def cmd_inspect(args: argparse.Namespace) -> int:
    """docker's document for each container found (see ctrexec.cli.views.inspect), or ``-f``'s
    text for each; a template that fails prints nothing (as docker's) and exits 125,
    ctrexec's code for bad input."""
    from ctrexec import inspect_task
    from ctrexec.cli.views import inspect as inspectdoc
    from ctrexec.cli.views import ps as psformat

    template = _inspect_template(args.format) if args.format else None  # before connecting
    client = connect(args)  # not the Executor: inspecting needs none of its own modules
    docs: list[dict[str, Any]] = []  # docker prints those it found, then exits 1

    def add(task_id: str) -> bool:
        info = inspect_task(client, task_id)
        dropped = info.log_dropped_bytes()  # the shared log daemon's default place
        docs.append(inspectdoc.document(info, log_dropped=dropped))
        return True

    with client:
        code = each(args.ids, add, resolver(client))
    if template is None:
        print_json(docs, sort_keys=False)
        return code
    for text in [psformat.execute(template, d) for d in docs]:
        print(text, flush=True)
    return code


def _inspect_template(text: str) -> Template:
    """``inspect -f``'s template; one that does not parse exits 64, docker inspect's
    code for it (a template that fails as it runs keeps docker's 1)."""
    from ctrexec.cli.views import gotemplate  # here, as the verbs' other views: start-up cost
    from ctrexec.cli.views import ps as psformat

    try:
        return psformat.parse_template(text)
    except gotemplate.TemplateError as exc:
        exc.exit_code = 64
        raise


def _last(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a number of containers, got {text!r}")
    return int(text)


def register(sub: argparse._SubParsersAction[ArgumentParser]) -> None:
    conn = connection_flags(short_namespace=False)  # -n is docker's --last here
    p = sub.add_parser("ps", parents=[conn, json_flag()], help="list tasks")
    p.add_argument("-a", "--all", action="store_true", help="stopped and created ones too")
    p.add_argument("-q", "--quiet", action="store_true", help="ids only")
    p.add_argument(
        "--no-trunc", action="store_true", help="whole ids and commands (ps cuts them, as docker)"
    )
    p.add_argument("--format", help="a template such as 'table {{.ID}}\\t{{.Status}}'; see README")
    p.add_argument(
        "-f", "--filter", action="append", default=[], metavar="KEY=VALUE",
        help="status=, label=, group=, netns=, name=, id= (repeatable)",
    )  # fmt: skip
    p.add_argument("-n", "--last", type=_last, metavar="N", help="the N newest, all states")
    p.add_argument("-l", "--latest", action="store_true", help="the newest, any state")
    p.set_defaults(func=cmd_ps)
    p = sub.add_parser("inspect", parents=[connection_flags()], help="show containers as JSON")
    p.add_argument("-f", "--format", help="a Go template such as '{{.State.Pid}}'; see README")
    p.add_argument("ids", nargs="+")
    p.set_defaults(func=cmd_inspect)
