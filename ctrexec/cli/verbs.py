"""What the verbs that take several names share, and the verbs docker has beyond them.

docker acts on every name given and reports each failure on its own line, then exits 1:
``rm a nosuch b`` removes ``a`` and ``b``. :func:`each` is that loop.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from ctrexec import CtrexecError, FailedPrecondition, NotFound
from ctrexec.cli._common import (
    ArgumentParser,
    connection_flags,
    executor,
    fail,
    json_flag,
    print_json,
    print_table,
    resolver,
    signal_pipe,
)

if TYPE_CHECKING:
    from datetime import datetime

    from ctrexec import Executor, LogEntry, Stats
    from ctrexec.cli.views.stats import StatsRow

#: docker's exit code when some of the names given failed.
SOME_FAILED = 1


def each(
    ids: Sequence[str], act: Callable[[str], object], resolve: Callable[[str], str] | None = None
) -> int:
    """Run ``act`` on what every word names (``resolve``: a container's id from a unique
    prefix, see Executor.lookup); print the word as given when it succeeds, as docker
    does, the error when not.

    ``act`` returning True has printed its own output (``start --json``).
    """
    failed = False
    for word in ids:
        try:
            printed = act(resolve(word) if resolve else word)
        except CtrexecError as err:
            fail(err)
            failed = True
            continue
        if printed is not True:
            print(word, flush=True)
    return SOME_FAILED if failed else 0


def until_ns(when: datetime) -> int:
    """``--until``'s bound, as :func:`until` and ``read_logs(until=)`` both compare it."""
    return int(when.timestamp() * 1e9)


def until(entries: Iterable[LogEntry], when: datetime, tail: int | None) -> Iterator[LogEntry]:
    """``logs --until``: the entries up to ``when``, then the last ``tail`` of those."""
    limit = until_ns(when)
    kept = [e for e in entries if e.time_ns <= limit]
    return iter(kept if tail is None else kept[max(0, len(kept) - tail) :] if tail else [])


def cmd_wait(args: argparse.Namespace) -> int:
    """docker's ``wait``: each container's exit code, one per line, once it has one.

    A container never started is waited for as docker does: until a ``start`` from
    elsewhere runs it and it exits.
    """
    ex = executor(args)

    def wait(task_id: str) -> bool:
        print(ex.wait(task_id, until_started=True).exit_code, flush=True)  # docker's wait
        return True

    return each(args.ids, wait, resolver(ex.client))


def cmd_rename(args: argparse.Namespace) -> int:
    """docker's ``rename``, for a container whose task is not running (Executor.rename)."""
    ex = executor(args)
    ex.rename(resolver(ex.client)(args.old), args.new)
    return 0


def cmd_restart(args: argparse.Namespace) -> int:
    ex = executor(args)

    def restart(task_id: str) -> None:
        # docker's restart of an --rm container restarts it: the stop keeps it
        ex.stop(task_id, timeout=args.time, signal=args.signal, remove=False)
        ex.start(task_id)

    return each(args.ids, restart, resolver(ex.client))


def cmd_port(args: argparse.Namespace) -> int:
    """docker's ``port``: ``80/tcp -> 0.0.0.0:8080`` for each published port; given a
    port, only its host addresses (``0.0.0.0:8080``), and an error when it has none."""
    ex = executor(args)
    found = 0
    for m in ex.inspect(resolver(ex.client)(args.id), addresses=False).ports:
        if args.port in (None, str(m.container_port), f"{m.container_port}/{m.protocol}"):
            host = m.host_ip or "0.0.0.0"  # noqa: S104 - docker's words for "any address"
            prefix = "" if args.port else f"{m.container_port}/{m.protocol} -> "
            print(f"{prefix}{host}:{m.host_port}")
            found += 1
    if args.port and not found:
        raise NotFound(f"No public port '{args.port}' published for {args.id}")
    return 0


def cmd_top(args: argparse.Namespace) -> int:
    """The task's processes as the host sees them (docker runs ps on the host too):
    read from /proc, or with ps options, the host's ``ps`` with them."""
    from ctrexec import Status

    ex = executor(args)
    info = ex.inspect(resolver(ex.client)(args.id), addresses=False)
    if info.status not in (Status.RUNNING, Status.PAUSED) or not info.pid:
        raise FailedPrecondition(f"container {args.id} is not running")  # the user's word
    if args.ps_options:
        print_table(*ex.top(info.id, args.ps_options))
        return 0
    rows = [
        [p.user, p.pid, p.ppid, time.strftime("%H:%M:%S", time.gmtime(p.cpu_seconds)), p.command]
        for p in ex.processes(info.id)
    ]
    print_table(["UID", "PID", "PPID", "TIME", "CMD"], rows)
    return 0


#: What ``stats`` writes before each table on a terminal: clear the screen, cursor home.
CLEAR_SCREEN = "\x1b[2J\x1b[H"


def cmd_stats(args: argparse.Namespace) -> int:
    """Stream a table of the named tasks (all running ones by default) until interrupted.

    CPU % is docker's: the CPU time used between two readings over the wall time
    between them (100 % is one CPU's worth), so the first table comes one interval
    after the first reading, and ``--no-stream`` reads twice, as docker does.
    """
    from ctrexec.cli.views import stats as statsview

    if args.format is not None:
        statsview.stats_template(args.format)  # a bad template before any reading
    ex = executor(args)
    lookup = resolver(ex.client)
    ids = list(dict.fromkeys(lookup(word) for word in args.ids))  # "No such container" first
    host_memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    # Streaming tables to a terminal redraw in place, as docker's; a pipe or a file gets
    # them one after another, a blank line apart, with no escape codes in its text.
    redraw = not args.no_stream and sys.stdout.isatty()
    with signal_pipe((signal.SIGINT, signal.SIGTERM)) as wake:
        before = _sample(ex, ids)
        while True:
            if select.select([wake], [], [], args.interval)[0]:
                return 128 + os.read(wake, 1)[0]  # interrupted, as docker's 130 for ^C
            results = _sample(ex, ids)
            rows = []
            for task_id, (now, net) in results.items():
                prev = before.get(task_id)
                cpu = cpu_percent(prev[0] if prev else None, now)
                rows.append(statsview.StatsRow(task_id, now, cpu, net, host_memory))
            if args.json:
                print_json({r.name: _stats_json(r) for r in rows})
            else:
                if redraw:
                    sys.stdout.write(CLEAR_SCREEN)
                print(
                    "\n".join(statsview.stats_lines(rows, args.format or statsview.STATS_DEFAULT))
                )
            sys.stdout.flush()
            if args.no_stream:
                return 0
            before = results
            if not args.json and not redraw:
                print()


def _stats_json(row: StatsRow) -> dict[str, object]:
    rx, tx = row.net or (None, None)
    return {
        **row.stats.to_json(),
        "cpu_percent": row.cpu_percent,
        "net_rx_bytes": rx,
        "net_tx_bytes": tx,
    }


def cpu_percent(before: Stats | None, after: Stats) -> float:
    """CPU time used between two readings over the wall time between them, in percent
    of one CPU; 0.0 without an earlier reading (a task that started meanwhile)."""
    if before is None:
        return 0.0
    wall_ns = (after.read_at - before.read_at).total_seconds() * 1e9
    used_ns = after.cpu_usage_ns - before.cpu_usage_ns
    if wall_ns <= 0 or used_ns < 0:  # a restart in between resets the counter
        return 0.0
    return used_ns / wall_ns * 100


def _sample(ex: Executor, ids: Sequence[str]) -> dict[str, tuple[Stats, tuple[int, int] | None]]:
    """Each task's metrics and its network counters (0 on the host's network, whose
    counters are not the task's, as docker's). Named tasks must all exist; of all
    running ones, those that exited meanwhile drop out."""
    infos = [ex.inspect(task_id, addresses=False) for task_id in ids] if ids else ex.list()
    out = {}
    for info in infos:
        try:
            stats = ex.stats(info.id)
        except NotFound:
            if ids:
                raise
            continue
        net = (0, 0) if info.netns_mode == "host" else ex.net_io(info.id)
        out[info.id] = (stats, net)
    return out


def stop_flags(p: ArgumentParser) -> None:
    """``stop``'s and ``restart``'s flags and ids, as docker's: the two stop alike."""
    p.add_argument("-t", "--time", type=float, help="seconds before SIGKILL")
    p.add_argument("-s", "--signal")
    p.add_argument("ids", nargs="+")


def register(sub: argparse._SubParsersAction[ArgumentParser]) -> None:
    conn = connection_flags()
    p = sub.add_parser("wait", parents=[conn], help="block until tasks exit, print exit codes")
    p.add_argument("ids", nargs="+")
    p.set_defaults(func=cmd_wait)
    p = sub.add_parser("rename", parents=[conn], help="rename a container that is not running")
    p.add_argument("old", metavar="CONTAINER")
    p.add_argument("new", metavar="NEW_NAME")
    p.set_defaults(func=cmd_rename)
    p = sub.add_parser("restart", parents=[conn], help="stop, then start tasks again")
    stop_flags(p)
    p.set_defaults(func=cmd_restart)
    p = sub.add_parser("port", parents=[conn], help="a task's published ports")
    p.add_argument("id")
    p.add_argument("port", nargs="?", metavar="PORT[/PROTO]")
    p.set_defaults(func=cmd_port)
    p = sub.add_parser("top", parents=[conn], help="a task's processes")
    p.add_argument("id")
    p.add_argument(
        "ps_options", nargs=argparse.REMAINDER, metavar="PS_OPTIONS", help="the host's ps's"
    )
    p.set_defaults(func=cmd_top)
    p = sub.add_parser(
        "stats", parents=[conn, json_flag()], help="cpu, memory, I/O and pids of tasks, live"
    )
    p.add_argument("--no-stream", action="store_true", help="print once and exit")
    p.add_argument(
        "--format",
        help="a Go template, table in front for a header (.Name .CPUPerc .MemUsage .NetIO ...)",
    )
    p.add_argument("--interval", type=float, default=1.0, help="seconds (default: 1.0)")
    p.add_argument("ids", nargs="*", help="tasks (default: all running)")
    p.set_defaults(func=cmd_stats)
