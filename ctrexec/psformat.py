"""``ps`` and ``inspect`` as docker prints them: its columns, durations, filters and a
documented subset of its Go templates.

Templates: ``{{.Field}}`` and ``{{json .Field}}`` only, no functions, pipelines or
conditionals; ``table`` in front prints a header and aligns the columns, which a tab
(``\\t``, typed literally) separates. ``ps`` knows the fields of :data:`PS_FIELDS`;
``inspect -f`` takes a dotted path into the JSON ``inspect`` prints (``{{.exit.code}}``)
or one of docker's names in :data:`INSPECT_ALIASES` (``{{.State.Pid}}``).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ctrexec.containerd.tasks import Status
from ctrexec.errors import InvalidArgument
from ctrexec.taskconfig import TaskInfo

_FIELD = re.compile(r"\{\{\s*(json\s+)?\.([A-Za-z0-9_.]*)\s*\}\}")
_LIVE = (Status.RUNNING, Status.PAUSED)


def human_duration(seconds: float) -> str:
    """docker's (go-units') wording of an age: ``About a minute``, ``3 hours``."""
    s = int(seconds)
    steps = [
        (1, "Less than a second", None),
        (2, "1 second", None),
        (60, None, (1, "seconds")),
        (120, "About a minute", None),
        (3600, None, (60, "minutes")),
        (7200, "About an hour", None),
        (48 * 3600, None, (3600, "hours")),
        (14 * 86400, None, (86400, "days")),
        (90 * 86400, None, (7 * 86400, "weeks")),
        (2 * 365 * 86400, None, (30 * 86400, "months")),
    ]
    for limit, fixed, unit in steps:
        if s < limit:
            return fixed if fixed else f"{s // unit[0]} {unit[1]}"  # type: ignore[index]
    return f"{s // (365 * 86400)} years"


def _ago(when: datetime | None, now: datetime) -> str:
    return f"{human_duration((now - when).total_seconds())} ago" if when else ""


def status_text(info: TaskInfo, now: datetime) -> str:
    """``Up 3 minutes``, ``Up 2 hours (Paused)``, ``Exited (0) 2 minutes ago``, ``Created``,
    and docker's ``Restarting (1) 5 seconds ago`` while the supervisor has a restart due."""
    if info.status in _LIVE:
        since = info.started_at or info.created_at
        up = f"Up {human_duration((now - since).total_seconds())}" if since else "Up"
        return f"{up} (Paused)" if info.status is Status.PAUSED else up
    if info.restarting and info.exit is not None:
        return f"Restarting ({info.exit.code}) {_ago(info.finished_at, now)}".rstrip()
    if info.exit is not None:
        oom = ", OOM killed" if info.oom_killed else ""
        return f"Exited ({info.exit.code}{oom}) {_ago(info.finished_at, now)}".rstrip()
    return "Created"


def state(info: TaskInfo) -> str:
    """docker's one-word state: created, running, paused or exited."""
    if info.status in _LIVE:
        return info.status.value
    return "exited" if info.exit is not None else "created"


def _command(info: TaskInfo) -> str:
    cfg = info.config
    argv = [*(cfg.entrypoint or ()), *(cfg.command or ())] if cfg else []
    text = shlex.join(argv)
    return f'"{text[:19]}…"' if len(text) > 20 else f'"{text}"'


def _labels(info: TaskInfo) -> str:
    labels = info.config.labels if info.config else {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _ports(info: TaskInfo) -> str:
    return ", ".join(
        f"{p.host_ip or '0.0.0.0'}:{p.host_port}->{p.container_port}/{p.protocol}"  # noqa: S104
        for p in info.ports
    )


#: ``ps --format`` fields, with the header ``table`` prints for each.
PS_FIELDS: dict[str, tuple[str, Callable[[TaskInfo, datetime], object]]] = {
    "ID": ("CONTAINER ID", lambda i, _: i.id[:12]),
    "Image": ("IMAGE", lambda i, _: i.image),
    "Command": ("COMMAND", lambda i, _: _command(i)),
    "CreatedAt": ("CREATED AT", lambda i, _: _iso(i.created_at)),
    "RunningFor": ("CREATED", lambda i, now: _ago(i.created_at, now)),
    "Status": ("STATUS", status_text),
    "State": ("STATE", lambda i, _: state(i)),
    "Ports": ("PORTS", lambda i, _: _ports(i)),
    "Names": ("NAMES", lambda i, _: i.id),
    "Netns": ("NETNS", lambda i, _: i.netns_path or i.netns_mode),
    "Group": ("GROUP", lambda i, _: i.group or ""),
    "Pid": ("PID", lambda i, _: i.pid if i.status in _LIVE else ""),
    "Labels": ("LABELS", lambda i, _: _labels(i)),
}
PS_DEFAULT = (
    "table {{.ID}}\t{{.Image}}\t{{.Command}}\t{{.RunningFor}}\t{{.Status}}\t{{.Ports}}"
    "\t{{.Names}}\t{{.Netns}}\t{{.Group}}"
)

#: docker's ``inspect`` names onto the keys of ctrexec's inspect JSON.
INSPECT_ALIASES = {
    "Id": "id",
    "ID": "id",
    "Name": "id",
    "Image": "image",
    "State.Status": "status",
    "State.Pid": "pid",
    "State.ExitCode": "exit_code",
    "State.OOMKilled": "oom_killed",
    "State.StartedAt": "started_at",
    "State.FinishedAt": "finished_at",
    "RestartCount": "restart_count",
    "State.Restarting": "restarting",
    "State.Error": "restart_error",
    "Created": "created_at",
    "Config.Labels": "labels",
}


def _iso(value: datetime | None) -> str:
    return value.isoformat() if value else ""


def _text(value: object, as_json: bool) -> str:
    if as_json:
        return json.dumps(value, sort_keys=True, default=str)
    if value is None:
        return "<no value>"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Mapping | list):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def render(template: str, lookup: Callable[[str], object]) -> str:
    """Fill ``{{.Field}}`` and ``{{json .Field}}``; any other ``{{ }}`` is refused."""
    rest = _FIELD.sub("", template)
    if "{{" in rest or "}}" in rest:
        raise InvalidArgument(
            f"template {template!r}: only {{{{.Field}}}} and {{{{json .Field}}}} are supported"
        )
    return _FIELD.sub(lambda m: _text(lookup(m.group(2)), bool(m.group(1))), template)


def ps_lines(infos: Sequence[TaskInfo], template: str, now: datetime | None = None) -> list[str]:
    """The ``ps`` output lines for ``template``; a ``table`` one aligned under a header."""
    now = now or datetime.now(UTC)
    template = template.replace("\\t", "\t").replace("\\n", "\n")
    table = template.startswith("table")
    body = template.removeprefix("table").strip() if table else template

    def lookup_in(info: TaskInfo | None) -> Callable[[str], object]:
        def lookup(name: str) -> object:
            if name not in PS_FIELDS:
                known = ", ".join(f".{f}" for f in PS_FIELDS)
                raise InvalidArgument(f"ps --format: unknown field .{name} (known: {known})")
            header, get = PS_FIELDS[name]
            return header if info is None else get(info, now)

        return lookup

    rows = [render(body, lookup_in(i)) for i in infos]
    if not table:
        return rows
    cells = [c.split("\t") for c in [render(body, lookup_in(None)), *rows]]
    widths = [max(len(r[i]) if i < len(r) else 0 for r in cells) for i in range(len(cells[0]))]
    return ["   ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in cells]


def inspect_lookup(data: Mapping[str, Any]) -> Callable[[str], object]:
    """A template lookup over one task's inspect JSON: dotted keys, or docker's names."""

    def lookup(name: str) -> object:
        value: object = data
        for key in INSPECT_ALIASES.get(name, name).split("."):
            if not isinstance(value, Mapping) or key not in value:
                raise InvalidArgument(f"inspect -f: no field .{name}")
            value = value[key]
        return value

    return lookup


#: The keys ``ps --filter`` understands.
FILTER_KEYS = ("status", "label", "group", "netns", "name", "id")


def parse_filters(items: Sequence[str]) -> dict[str, list[str]]:
    """``key=value`` items; several of one key match any of them, as in docker."""
    out: dict[str, list[str]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in FILTER_KEYS:
            raise InvalidArgument(
                f"invalid filter {item!r} (expected KEY=VALUE, KEY one of {', '.join(FILTER_KEYS)})"
            )
        out.setdefault(key, []).append(value)
    return out


def matches(info: TaskInfo, filters: Mapping[str, Sequence[str]]) -> bool:
    """Every key must match (docker ANDs keys, ORs the values of one key)."""
    tests: dict[str, Callable[[str], bool]] = {
        "status": lambda v: state(info) == v,
        "label": lambda v: _label_matches(info.labels, v),
        "group": lambda v: info.group == v,
        "netns": lambda v: (
            v in (info.netns_mode, info.netns_path) or (info.netns_path or "").endswith(f"/{v}")
        ),
        "name": lambda v: v in info.id,
        "id": info.id.startswith,
    }
    return all(any(tests[k](v) for v in values) for k, values in filters.items())


def _label_matches(labels: Mapping[str, str], want: str) -> bool:
    key, sep, value = want.partition("=")
    return key in labels and (not sep or labels[key] == value)
