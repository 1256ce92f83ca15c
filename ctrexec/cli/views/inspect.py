"""``inspect``'s document: docker's shape for the facts ctrexec has (pure).

Scripts written for ``docker inspect`` read ``.State.Status``, ``.Config.Env`` or
``.NetworkSettings.IPAddress``; this builds those keys, with docker's types and
spellings, from a :class:`TaskInfo`, and keeps ctrexec's own view (snake_case, with
the run, the namespace, the group and the log path) whole under ``Ctrexec``. Keys
docker has and ctrexec cannot know (GraphDriver, Driver...) are left out, not
made up. Go maps (labels, ports) are :class:`~ctrexec.cli.views.gofuncs.GoMap`, so templates
index and range over them as docker's do.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any

from ctrexec import Status, TaskConfig, TaskInfo
from ctrexec.cli.views.gofuncs import GoMap
from ctrexec.cli.views.ps import state

#: Go's zero time, which docker prints for a time that never was.
ZERO_TIME = "0001-01-01T00:00:00Z"
_LIVE = (Status.RUNNING, Status.PAUSED, Status.PAUSING)
#: Bind propagations as docker's ``Mounts`` names them (``rprivate`` unless given).
_PROPAGATIONS = ("private", "rprivate", "shared", "rshared", "slave", "rslave")


def rfc3339(when: datetime | None) -> str:
    """Go's RFC 3339 with nanoseconds, in UTC (trailing zeros of the fraction dropped)."""
    if when is None:
        return ZERO_TIME
    utc = when.astimezone(UTC) if when.tzinfo else when.replace(tzinfo=UTC)
    frac = f"{utc.microsecond:06d}".rstrip("0")
    return utc.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


def document(info: TaskInfo, *, log_dropped: int = 0) -> dict[str, Any]:
    """One container as ``docker inspect`` shows it, plus ``Ctrexec``: ctrexec's own.

    ``LogDroppedBytes`` (ctrexec's, next to docker's ``LogPath``): the bytes of output
    lost to a full log disk (:meth:`ctrexec.TaskInfo.log_dropped_bytes`).
    """
    args = list(info.args)
    return {
        "Id": info.id,
        "Created": rfc3339(info.created_at),
        "Path": args[0] if args else "",
        "Args": args[1:],
        "State": state_of(info),
        # docker's: the image's ID (the reference is Config.Image); a record made
        # before ctrexec kept the ID shows the reference, the one name it has
        "Image": info.image_id or info.image,
        "LogPath": info.log_path,
        "LogDroppedBytes": log_dropped,
        "Name": f"/{info.id}",
        "RestartCount": info.restart_count,
        "HostConfig": host_config(info.config, info),
        "Mounts": mounts_of(info),
        "Config": config_of(info),
        "NetworkSettings": network_settings(info),
        "Ctrexec": ctrexec_view(info),
    }


def ctrexec_view(info: TaskInfo) -> dict[str, Any]:
    """ctrexec's own JSON, with no pid once the task is not running (it is nobody's now)."""
    data = info.to_json()
    if info.status not in _LIVE:
        data["pid"] = None
    return data


def state_of(info: TaskInfo) -> dict[str, Any]:
    """docker's ``State``. An UNKNOWN task (its shim silent) is ``Status`` ``unknown``,
    ``Running`` true (it is there and nothing says it stopped; a script must not start
    a second copy), ``Pid`` 0 (not read), and ``Error`` says why."""
    live = info.status in _LIVE
    again = info.restarting
    unknown = info.status is Status.UNKNOWN
    return {
        "Status": state(info),
        "Running": live or again or unknown,
        "Paused": info.status in (Status.PAUSED, Status.PAUSING),
        "Restarting": again,
        "OOMKilled": info.oom_killed,
        "Pid": info.pid if live else 0,
        "ExitCode": info.exit.exit_code if info.exit and not live else 0,
        "StartedAt": rfc3339(info.started_at),
        "FinishedAt": rfc3339(info.finished_at),
        "Error": _error(info),
    }


def _error(info: TaskInfo) -> str:
    if info.unknown_reason:
        return f"state unknown: {info.unknown_reason}"
    said = [*map(str, info.problems), *([info.restart_error] if info.restart_error else [])]
    return "; ".join(said) or info.exit_reason or ""


def _split_args(
    cfg: TaskConfig | None, image_entry: int | None, args: list[str]
) -> tuple[list[str], list[str]]:
    """Entrypoint and Cmd of the argv the task runs.

    The user's entrypoint, else the image's (its length is a label written at create),
    says where the argv splits; for a record made before that label, the user's
    command does, and with none, all of it is shown as Cmd.
    """
    if cfg is not None and cfg.entrypoint is not None:
        entry = [] if list(cfg.entrypoint) == [""] else list(cfg.entrypoint)
        return entry, args[len(entry) :]
    if image_entry is not None and image_entry <= len(args):
        return args[:image_entry], args[image_entry:]
    if cfg is not None and cfg.command and args[-len(cfg.command) :] == list(cfg.command):
        return args[: len(args) - len(cfg.command)], list(cfg.command)
    return [], args


def config_of(info: TaskInfo) -> dict[str, Any]:
    cfg = info.config
    entry, cmd = _split_args(cfg, info.image_entrypoint_args, list(info.args))
    # "/" is what the spec says for an image with no WorkingDir, which docker shows as ""
    from_image = info.image_workdir is not None
    workdir = (cfg.workdir if cfg else None) or (
        "" if info.workdir == "/" and not from_image else info.workdir
    )
    return {
        "Hostname": info.hostname,
        "User": (cfg.user if cfg else None) or "",
        "Tty": bool(cfg and cfg.tty),
        "OpenStdin": bool(cfg and cfg.stdin_open),
        "Env": list(info.env),
        "Cmd": cmd or None,
        "Image": info.image,
        "WorkingDir": workdir,
        "Entrypoint": entry or None,
        "Labels": GoMap(dict(sorted((cfg.labels if cfg else {}).items())), zero=""),
    }


def mounts_of(info: TaskInfo) -> list[dict[str, Any]]:
    """docker's ``Mounts``: each ``-v``/``--mount`` with its host source; a named or
    anonymous volume (its directory ``NAME/_data``, the name among the record's
    volumes) as docker's ``volume``, with its ``Name`` and the ``local`` driver."""
    volumes = set(info.volume_names)
    out: list[dict[str, Any]] = []
    for m in info.mounts:
        rw = "ro" not in m.options
        source = PurePosixPath(m.source)
        if source.name == "_data" and source.parent.name in volumes:
            out.append({
                "Type": "volume", "Name": source.parent.name, "Source": m.source,
                "Destination": m.destination, "Driver": "local", "Mode": "", "RW": rw,
                "Propagation": "",
            })  # fmt: skip
            continue
        kind = "tmpfs" if m.type == "tmpfs" else "bind"
        spread = next((o for o in m.options if o in _PROPAGATIONS), "rprivate")
        out.append({
            "Type": kind, "Source": m.source if kind == "bind" else "",
            "Destination": m.destination, "Mode": "", "RW": rw,
            "Propagation": spread if kind == "bind" else "",
        })  # fmt: skip
    return out


def _bindings(info: TaskInfo, default_ip: str) -> GoMap:
    out: dict[str, list[dict[str, str]]] = {}
    for p in info.ports:
        key = f"{p.container_port}/{p.protocol}"
        bound = {"HostIp": p.host_ip or default_ip, "HostPort": str(p.host_port)}
        out.setdefault(key, []).append(bound)
    return GoMap(dict(sorted(out.items())))


def host_config(cfg: TaskConfig | None, info: TaskInfo) -> dict[str, Any]:
    restart = cfg.restart if cfg else None
    return {
        "Binds": list(cfg.volumes) if cfg and cfg.volumes else None,
        "PortBindings": _bindings(info, ""),
        "RestartPolicy": {
            "Name": restart.policy if restart else "no",
            "MaximumRetryCount": restart.max_attempts if restart else 0,
        },
        "AutoRemove": bool(cfg and cfg.auto_remove),
        "Privileged": bool(cfg and cfg.privileged),
        "ReadonlyRootfs": bool(cfg and cfg.read_only),
        "Memory": (cfg.memory_bytes or 0) if cfg else 0,
        "NanoCpus": round(cfg.cpus * 1e9) if cfg and cfg.cpus else 0,
    }


def network_settings(info: TaskInfo) -> dict[str, Any]:
    v4 = [a for a in info.addresses or () if a.family == 4]
    v6 = [
        a
        for a in info.addresses or ()
        if a.family == 6 and not a.address.lower().startswith("fe80:")
    ]
    own = {
        "IPAddress": v4[0].address if v4 else "",
        "IPPrefixLen": v4[0].prefixlen if v4 else 0,
        "GlobalIPv6Address": v6[0].address if v6 else "",
        "GlobalIPv6PrefixLen": v6[0].prefixlen if v6 else 0,
    }
    mode = info.network
    networks = GoMap({mode: dict(own)} if mode and (v4 or v6) else {})
    return {**own, "Ports": _bindings(info, "0.0.0.0"), "Networks": networks}  # noqa: S104
