"""Task commands: run, create, start, stop, kill, rm, logs, exec, pause, unpause."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ctrexec import (
    DEFAULT_LOG_DIR,
    DEFAULT_STOP_TIMEOUT,
    LOG_DRIVERS,
    AlreadyRunning,
    CtrexecError,
    FailedPrecondition,
    InvalidArgument,
    InvalidField,
    MissingArguments,
    NotFound,
)
from ctrexec.cli import attach, follow, publish, runflags
from ctrexec.cli._common import (
    ArgumentParser,
    connect,
    connection_flags,
    executor,
    json_flag,
    print_json,
    resolver,
)
from ctrexec.cli._time import point_in_time
from ctrexec.cli.registry import add_pull_policy, ensure_images
from ctrexec.cli.verbs import each, stop_flags, until, until_ns

# The library (grpc, stubs, attrs) is imported inside the commands: building the
# parser, --help and bad flags must not load it.
if TYPE_CHECKING:
    from ctrexec import Executor, NetworkRequest, TaskConfig


def _env(items: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not key:
            raise InvalidArgument(f"invalid environment variable {item!r}")
        if sep:
            env[key] = value
        elif key in os.environ:
            env[key] = os.environ[key]
    return env


def parse_key_values(items: list[str], *, what: str = "label") -> dict[str, str]:
    """``--label``, ``--sysctl``, ``--annotation``: ``K=V`` flags into a dict, ``K``
    alone an empty value, as docker takes them; TaskConfig checks what the keys may be."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not key:
            raise InvalidArgument(f"invalid {what} {item!r}: expected KEY=VALUE")
        out[key] = value if sep else ""
    return out


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text!r}")
    return value


def _tail(text: str) -> int | None:
    """``--tail N`` or ``--tail all`` (docker's spelling of "everything")."""
    if text == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of lines or all, got {text!r}")
    return value


def _cpus(text: str) -> float | None:
    """``--cpus``: 0 is docker's "no limit"; other values are checked against the range."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of CPUs, got {text!r}") from None
    return None if value == 0 else value


def _entrypoint(value: str | None) -> tuple[str, ...] | None:
    """``--entrypoint`` as docker reads it: one executable, not split; ``''`` clears it."""
    if value is None:
        return None
    return (value,) if value else ()


#: TaskConfig fields whose flag is not ``--`` plus the field's name with dashes.
_FLAGS = {
    "image": "IMAGE",
    "command": "COMMAND",
    "volumes": "--volume",
    "mounts": "--mount",
    "devices": "--device",
    "sysctls": "--sysctl",
    "annotations": "--annotation",
    "labels": "--label",
    "auto_remove": "--rm",
    "stdin_open": "--interactive",
    "log_max_size": "--log-opt max-size",
    "log_max_files": "--log-opt max-file",
    "log_transport": "--log-opt transport",
    "extra_hosts": "--add-host",
    "dns_search": "--dns-search",
    "dns_options": "--dns-option",
    "ulimits": "--ulimit",
}


def _flag(field: str) -> str:
    """The flag that sets a TaskConfig field."""
    return _FLAGS.get(field, "--" + field.replace("_", "-"))


@contextlib.contextmanager
def _by_flag() -> Iterator[None]:
    """Report a refused TaskConfig field by the flag that set it, as docker does."""
    try:
        yield
    except InvalidField as exc:
        flag = _flag(exc.field)
        if exc.conflicts_with:  # docker's words, as ``run --restart always --rm``
            raise InvalidArgument(
                f"conflicting options: {flag} and {_flag(exc.conflicts_with)}"
            ) from exc
        if isinstance(exc.value, tuple | Mapping):  # the reason names the bad item
            raise InvalidArgument(f"invalid {flag}: {exc.reason}") from exc
        raise InvalidArgument(f"invalid value {exc.quoted_value} for {flag}: {exc.reason}") from exc


def _config(args: argparse.Namespace) -> TaskConfig:
    import secrets

    from ctrexec import TaskConfig, parse_log_opts, read_env_files

    driver = LOG_DRIVERS[0] if args.log_driver is None else args.log_driver
    max_size, max_files, transport = parse_log_opts(driver, args.log_opt)
    restart = publish.restart_config(args)
    return TaskConfig(
        name=args.name if args.name is not None else f"ctrexec-{secrets.token_hex(4)}",
        image=args.image,
        command=tuple(args.command) if args.command else None,
        entrypoint=_entrypoint(args.entrypoint),
        env={**read_env_files(args.env_file, os.environ), **_env(args.env)},
        workdir=args.workdir,
        user=args.user,
        group_add=args.group_add,
        netns=publish.netns_value(args),
        hostname=args.hostname,
        extra_hosts=args.add_host,
        dns=args.dns,
        dns_search=args.dns_search,
        dns_options=args.dns_option,
        volumes=args.volume,
        tmpfs=args.tmpfs,
        mounts=args.mount,
        read_only=args.read_only,
        **_limits(args),
        cap_add=args.cap_add,
        cap_drop=args.cap_drop,
        privileged=args.privileged,
        security_opt=args.security_opt,
        pid=args.pid,
        ipc=args.ipc,
        platform=args.platform,
        devices=args.device,
        sysctls=parse_key_values(args.sysctl, what="sysctl"),
        oom_score_adj=args.oom_score_adj,
        annotations=parse_key_values(args.annotation, what="annotation"),
        labels=parse_key_values(args.label),
        init=args.init,
        tty=args.tty,
        stdin_open=args.interactive,
        group=args.group,
        runtime=args.runtime,
        stop_signal=args.stop_signal,
        stop_timeout=args.stop_timeout,
        auto_remove=args.rm,
        log_driver=driver,
        log_max_size=max_size,
        log_max_files=max_files,
        log_transport=transport,
        restart=restart,
    )


def _limits(args: argparse.Namespace) -> dict[str, Any]:
    """The resource flags, as TaskConfig's fields."""
    return {
        "memory": args.memory,
        "memory_swap": args.memory_swap,
        "shm_size": args.shm_size,
        "ulimits": args.ulimit,
        "cpus": args.cpus,
        "cpu_shares": args.cpu_shares,
        "cpuset_cpus": args.cpuset_cpus,
        "pids_limit": args.pids_limit,
    }


def _prepared(args: argparse.Namespace) -> tuple[Executor, TaskConfig, NetworkRequest | None]:
    """What ``run`` and ``create`` do before the container: the config and the network
    from the flags (checked before connecting: bad flags start no daemon), its image by
    ID or name and pulled as ``--pull`` says (``-P`` reads it at the create)."""
    import attrs

    from ctrexec import resolve_image

    config = _config(args)
    network = publish.network_request(args)
    if network is not None:
        network.check(config)
    ex = executor(args)
    # an image ID names the image
    config = attrs.evolve(config, image=resolve_image(ex.client, config.image))
    ensure_images(ex.client, [config], args, ex.images)
    return ex, config, network


def _image_given(args: argparse.Namespace, verb: str) -> None:
    """docker's refusal of ``run``/``create`` without an image, and its exit code 1."""
    if args.image is None:
        raise MissingArguments(
            f"'ctrexec {verb}' requires at least 1 argument. See 'ctrexec {verb} --help'."
        )


def cmd_run(args: argparse.Namespace) -> int:
    _image_given(args, "run")
    attached = (args.interactive or args.tty) and not args.detach
    keys = attach.prepare(args) if attached else b""
    with _by_flag(), runflags.cidfile(args.cidfile) as write_cid:
        ex, config, network = _prepared(args)
        write_cid(config.name)
        if attached:
            if network is not None:  # its namespace is made before the attached start
                ex.create(config, network=network)
            publish.warn_unsupervised(ex.client, [config])
            remove = lambda task_id: _remove(ex, task_id, force=True)  # noqa: E731
            created = network is not None
            return attach.run_attached(
                ex, config, keys, auto_remove=args.rm, remove=remove, created=created
            )
        if args.detach:
            handle = ex.start_task(config, network=network)
        else:  # its exit watched from before the start: a supervisor may remove it at once
            handle, exit_future = ex.start_watched(config, network=network)
    publish.warn_unsupervised(ex.client, [config])
    if args.detach:
        if args.rm:
            _warn_unsupervised_rm(ex, handle.id)
        print_json(handle.to_json()) if args.json else print(handle.id)
        return 0
    try:
        code = follow.stream_until_exit(
            ex, handle.id, handle.log_path, config.log_driver, reap=args.rm, exit_future=exit_future
        )
    finally:
        if args.rm:
            _remove(ex, handle.id, force=True)
    return code


def _warn_unsupervised_rm(ex: Executor, task_id: str) -> None:
    """``-d --rm`` relies on ``ctrexec supervise`` (ctrexec has no daemon): say so if
    none runs. (The supervisor module, with its event stubs, loads only here.)"""
    from ctrexec import is_supervised

    if is_supervised(ex.client):
        return
    print(
        f"ctrexec: warning: --rm: no `ctrexec supervise` runs for namespace "
        f"{ex.client.namespace}; {task_id} is removed when it exits only once one runs "
        f"(or by `ctrexec stop`/`ctrexec rm`)",
        file=sys.stderr,
    )


def _remove(ex: Executor, task_id: str, *, force: bool = False) -> None:
    """Destroy; a supervisor that removed the ``--rm`` container first is not an error."""
    with contextlib.suppress(NotFound):
        ex.destroy(task_id, force=force)


def cmd_create(args: argparse.Namespace) -> int:
    _image_given(args, "create")
    with _by_flag(), runflags.cidfile(args.cidfile) as write_cid:
        ex, config, network = _prepared(args)
        write_cid(config.name)
        record = ex.create(config, network=network)
    publish.warn_unsupervised(ex.client, [config])
    print(record.id)
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    ex = executor(args)
    lookup = resolver(ex.client)
    if args.attach or args.interactive:  # docker attaches to one container only
        task_id = lookup(args.ids[0])
        info = ex.inspect(task_id, addresses=False)  # before: a --rm one may go at its exit
        if info.config is not None and info.config.interactive:
            return attach.start_attached(ex, task_id, info.config.tty, args)
        handle, exit_future = ex.start_watched(task_id)
        return follow.stream_until_exit(
            ex, task_id, handle.log_path, info.log_driver, exit_future=exit_future
        )
    return each(args.ids, lambda task_id: _start_one(ex, task_id, args.json), lookup)


def _start_one(ex: Executor, task_id: str, as_json: bool) -> bool:
    """Start one task; one that runs already is left alone, as docker does (exit 0)."""
    try:
        handle = ex.start(task_id)
    except AlreadyRunning:
        return False
    if as_json:
        print_json(handle.to_json())
    return as_json


def cmd_stop(args: argparse.Namespace) -> int:
    """docker's ``stop A B C``: the words resolved first, then all stopped together in
    one stop timeout (Executor.stop_many; an --rm container removed too, the library's
    rule), each word then reported in turn."""
    ex = executor(args)
    lookup = resolver(ex.client)
    found = lookup.named(args.ids)  # the other words are reported in turn below
    outcome = dict(
        ex.stop_many(list(found.values()), timeout=args.time, signal=args.signal, remove=True)
    )

    def stop(word: str) -> None:
        if word not in found:  # unknown or ambiguous: the lookup says so (or it came)
            ex.stop(lookup(word), timeout=args.time, signal=args.signal)
            return
        error = outcome.get(found[word])
        if error is not None:
            raise error

    return each(args.ids, stop)


def cmd_kill(args: argparse.Namespace) -> int:
    ex = executor(args)
    return each(args.ids, lambda task_id: ex.signal(task_id, args.signal), resolver(ex.client))


def cmd_rm(args: argparse.Namespace) -> int:
    """docker's ``rm``: the words resolved first, then all removed by the library
    (Executor.remove_many: with -f, killed together, none left to a supervisor's
    restart), each word then reported in turn."""
    ex = executor(args)
    lookup = resolver(ex.client)
    found = lookup.named(args.ids)  # the other words are reported in turn below
    ids = list(dict.fromkeys(found.values()))
    outcome = dict(ex.remove_many(ids, force=args.force, volumes=args.volumes))

    def resolve(word: str) -> str:
        try:
            return lookup(word)
        except NotFound:
            # No record, but maybe what a removal cut short left of it (its snapshot,
            # files): destroy removes those, then says NotFound itself.
            with contextlib.suppress(CtrexecError):
                ex.destroy(word, force=args.force)
            raise

    def remove(word: str) -> None:
        if word not in found:  # unknown or ambiguous: resolve says so
            ex.destroy(resolve(word), force=args.force, volumes=args.volumes)
            return
        task_id = found[word]
        if task_id not in outcome:  # named twice: removed already
            raise NotFound(f"No such container: {word}")
        error = outcome.pop(task_id)
        if error is not None:
            raise error

    return each(args.ids, remove)


def cmd_logs(args: argparse.Namespace) -> int:
    from ctrexec import Status, inspect_task, read_logs

    client = connect(args)  # not the Executor: reading a log needs none of its modules
    task_id = resolver(client)(args.id)
    info = inspect_task(client, task_id, addresses=False)

    def exited() -> bool:
        state = inspect_task(client, task_id, addresses=False).status
        return state not in (Status.RUNNING, Status.PAUSED, Status.CREATED)

    info.check_logs(timestamps=args.timestamps)
    driver = info.log_driver
    # --until's own filter reads everything; read_logs's can read a tail from the end,
    # but a follower's --tail counts the entries that come later as well
    direct = args.until is None or not args.follow
    limit = None if args.until is None else until_ns(args.until)
    entries = read_logs(
        info.log_path, driver=driver, follow=args.follow, since=args.since,
        exited=exited if args.follow else None, tail=args.tail if direct else None,
        until=limit if direct else None,
    )  # fmt: skip
    dropped = 0
    last = None  # the stream written last: flushed when the other comes, so the two
    # keep their order where they share a file (2>&1), without a flush per line
    for entry in entries if direct else until(entries, args.until, args.tail):
        out = sys.stderr if entry.stderr else sys.stdout
        if last is not None and out is not last:
            last.flush()
        if args.timestamps:
            out.write(f"{entry.time} ")
        out.write(entry.message)
        if args.follow:
            out.flush()  # a follower prints each line as it comes
        dropped += entry.dropped
        last = out
    if last is not None:
        last.flush()
    if dropped:  # the marker lines say where; this says how much, apart from the output
        print(f"ctrexec: {dropped} bytes of {task_id}'s output were dropped", file=sys.stderr)
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    if args.detach:
        return _exec_detached(args)
    if args.interactive or args.tty:
        if args.timeout is not None:
            raise InvalidArgument("exec: --timeout cannot be used with -i or -t")
        keys = attach.prepare(args)
        return attach.exec_attached(executor(args), args, _env(args.env), keys)
    ex = executor(args)
    result = ex.exec(
        resolver(ex.client)(args.id),
        args.command,
        env=_env(args.env),
        workdir=args.workdir,
        user=args.user,
        timeout=args.timeout,
    )
    sys.stdout.buffer.write(result.stdout)
    sys.stdout.flush()
    sys.stderr.buffer.write(result.stderr)
    sys.stderr.flush()
    return result.exit_code


def _exec_detached(args: argparse.Namespace) -> int:
    """docker's ``exec -d``: start the command, print nothing, exit 0 at once; the
    command runs on with its output discarded, the task its keeper."""
    if args.interactive or args.tty or args.timeout is not None:
        raise InvalidArgument("exec: -d cannot be used with -i, -t or --timeout")
    ex = executor(args)
    ex.exec_detached(
        resolver(ex.client)(args.id), args.command, env=_env(args.env), workdir=args.workdir,
        user=args.user,
    )  # fmt: skip
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    ex = executor(args)
    return each(
        args.ids, ex.pause if args.command_name == "pause" else ex.resume, resolver(ex.client)
    )


def _run_flags(p: ArgumentParser) -> None:
    attach.interactive_flags(p)
    runflags.add_flags(p)
    p.add_argument("--name", help="container id (default: generated)")
    p.add_argument("--netns", default="none", help="NAME, /path, host or none (default: none)")
    publish.add_flags(p)
    p.add_argument("-e", "--env", action="append", default=[], metavar="K=V")
    p.add_argument("-w", "--workdir")
    p.add_argument("-u", "--user")
    p.add_argument("-v", "--volume", action="append", default=[], metavar="SRC:DST[:ro]")
    p.add_argument("--tmpfs", action="append", default=[], metavar="DST[:OPTS]")
    p.add_argument("--mount", action="append", default=[], metavar="type=TYPE,target=DST,...")
    p.add_argument("--read-only", action="store_true")
    p.add_argument("-m", "--memory")
    p.add_argument("--cpus", type=_cpus, help="CPUs' worth of time; 0 means no limit")
    p.add_argument("--cpu-shares", type=int)
    p.add_argument("--cpuset-cpus")
    p.add_argument("--pids-limit", type=int)
    p.add_argument("-l", "--label", action="append", default=[], metavar="K=V")
    p.add_argument("--annotation", action="append", default=[], metavar="K=V")
    p.add_argument("--group", help="group name: tasks of a group share one shim")
    p.add_argument("--runtime", help="runc (default), crun, runsc, or io.containerd.NAME.vN")
    p.add_argument("--cap-add", action="append", default=[])
    p.add_argument("--cap-drop", action="append", default=[])
    p.add_argument("--privileged", action="store_true")
    p.add_argument("--device", action="append", default=[])
    p.add_argument("--sysctl", action="append", default=[], metavar="K=V")
    p.add_argument("--oom-score-adj", type=int)
    p.add_argument("--hostname")
    p.add_argument("--add-host", action="append", default=[], metavar="NAME:IP")
    p.add_argument("--dns", action="append", default=[], metavar="IP", help="a nameserver")
    p.add_argument("--dns-search", action="append", default=[], metavar="DOMAIN")
    p.add_argument("--dns-option", action="append", default=[], metavar="OPTION")
    p.add_argument("--entrypoint")
    p.add_argument("--stop-signal")
    p.add_argument(
        "--stop-timeout", type=float, default=DEFAULT_STOP_TIMEOUT, help="(default: %(default)s)"
    )
    p.add_argument("--rm", action="store_true", help="remove the container when it exits")
    p.add_argument("--log-dir", help=f"where task logs go (default {DEFAULT_LOG_DIR})")
    p.add_argument(
        "--log-driver",
        metavar="DRIVER",
        help=f"{', '.join(LOG_DRIVERS)} (default {LOG_DRIVERS[0]}); see README",
    )
    p.add_argument(
        "--log-opt",
        action="append",
        default=[],
        metavar="K=V",
        help=runflags.log_opts_help(),
    )
    add_pull_policy(p)
    p.add_argument("image", nargs="?")  # its absence refused by _image_given, as docker's
    p.add_argument("command", nargs=argparse.REMAINDER)


def _logs_parser(sub: argparse._SubParsersAction[ArgumentParser]) -> None:
    conn = connection_flags(short_namespace=False)  # -n is docker's --tail here
    p = sub.add_parser("logs", parents=[conn], help="print a task's logs")
    p.add_argument("-f", "--follow", action="store_true")
    p.add_argument("-t", "--timestamps", action="store_true")
    p.add_argument(
        "-n", "--tail", type=_tail, default=None, help="last N lines, or all (default: all)"
    )
    p.add_argument("--since", type=point_in_time, help="from this time or age (10m) on")
    p.add_argument("--until", type=point_in_time, help="up to this time or age (10m)")
    p.add_argument("id")
    p.set_defaults(func=cmd_logs)


def register(sub: argparse._SubParsersAction[ArgumentParser]) -> None:
    conn, js = connection_flags(), json_flag()
    p = sub.add_parser("run", parents=[conn, js], help="create and start a task")
    p.add_argument("-d", "--detach", action="store_true")
    attach.detach_keys_flag(p)
    _run_flags(p)
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("create", parents=[conn, js], help="create a container, do not start it")
    _run_flags(p)
    p.set_defaults(func=cmd_create, detach=True)
    p = sub.add_parser("start", parents=[conn, js], help="start (again) created or exited tasks")
    attach.start_flags(p)
    p.add_argument("ids", nargs="+")
    p.set_defaults(func=cmd_start)
    p = sub.add_parser("stop", parents=[conn], help="stop tasks: stop signal, then SIGKILL")
    stop_flags(p)
    p.set_defaults(func=cmd_stop)
    p = sub.add_parser("kill", parents=[conn], help="send a signal")
    p.add_argument("-s", "--signal", default="SIGKILL")
    p.add_argument("ids", nargs="+")
    p.set_defaults(func=cmd_kill)
    p = sub.add_parser("rm", parents=[conn], help="remove containers")
    p.add_argument("-f", "--force", action="store_true")
    p.add_argument("-v", "--volumes", action="store_true", help="and their anonymous volumes")
    p.add_argument("ids", nargs="+")
    p.set_defaults(func=cmd_rm)
    _logs_parser(sub)
    p = sub.add_parser("exec", parents=[conn], help="run a command in a running task")
    attach.interactive_flags(p, detach_keys=True)
    p.add_argument(
        "-d", "--detach", action="store_true", help="start the command and return; it runs on"
    )
    p.add_argument("-e", "--env", action="append", default=[])
    p.add_argument("-w", "--workdir")
    p.add_argument("-u", "--user")
    p.add_argument(
        "--timeout",
        type=_positive_seconds,
        metavar="SECONDS",
        help="kill the command and fail (exit 125) if it runs longer",
    )
    p.add_argument("id")
    p.add_argument("command", nargs=argparse.REMAINDER)
    # docker's 1 for an exec on a stopped or paused container (the daemon's refusal)
    p.set_defaults(func=cmd_exec, error_exits=((FailedPrecondition, 1),))
    for name in ("pause", "unpause"):
        p = sub.add_parser(name, parents=[conn], help=f"{name} tasks")
        p.add_argument("ids", nargs="+")
        p.set_defaults(func=cmd_pause, command_name=name)
