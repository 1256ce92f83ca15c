"""``ps`` as docker prints it: its columns, durations, filters and Go templates.

Templates are Go's (:mod:`ctrexec.cli.views.gotemplate`, the one engine ``inspect -f`` uses
too); ``table`` in front prints a header and aligns the columns, which a tab (``\\t``,
typed literally) separates. A row has the fields of :data:`PS_FIELDS` and docker's
``.Label "KEY"``.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime

from ctrexec import InvalidArgument, Status, TaskInfo
from ctrexec.cli.views import gotemplate
from ctrexec.cli.views.durations import human_duration

_LIVE = (Status.RUNNING, Status.PAUSED)
#: What ``Unknown`` says in ``ps``'s STATUS (``inspect``'s State.Error has the details).
UNKNOWN_WHY = "shim not answering"


def _ago(when: datetime | None, now: datetime) -> str:
    return f"{human_duration((now - when).total_seconds())} ago" if when else ""


def status_text(info: TaskInfo, now: datetime) -> str:
    """``Up 3 minutes``, ``Up 2 hours (Paused)``, ``Exited (0) 2 minutes ago``, ``Created``,
    and docker's ``Restarting (1) 5 seconds ago`` while the supervisor has a restart due;
    each problem in parentheses after it, as docker's health (``Up 3 minutes
    (namespace pin lost)``), and why a run ended when no exit was seen
    (``Exited (255) 1 minute ago (host restarted)``). A task whose shim did not answer
    for its state is ``Unknown (shim not answering)``: docker has no word for it (its
    daemon blocks instead), and ctrexec will not guess "Up" or "Exited"."""
    return _base_status(info, now) + "".join(f" ({p.what})" for p in info.problems)


def _base_status(info: TaskInfo, now: datetime) -> str:
    if info.status is Status.UNKNOWN:
        return f"Unknown ({UNKNOWN_WHY})"
    if info.status in _LIVE:
        since = info.started_at or info.created_at
        up = f"Up {human_duration((now - since).total_seconds())}" if since else "Up"
        return f"{up} (Paused)" if info.status is Status.PAUSED else up
    if info.restarting and info.exit is not None:
        return f"Restarting ({info.exit.exit_code}) {_ago(info.finished_at, now)}".rstrip()
    if info.exit is not None:
        oom = ", OOM killed" if info.oom_killed else ""
        why = f" ({info.exit_reason})" if info.exit_reason else ""
        return f"Exited ({info.exit.exit_code}{oom}) {_ago(info.finished_at, now)}".rstrip() + why
    return "Created"


def problem_lines(infos: Sequence[TaskInfo]) -> list[str]:
    """One line per problem the listed tasks have, with the command that repairs it
    (said once for a group's members: they share it)."""
    seen: dict[tuple[str, str], str] = {}
    for info in infos:
        whose = f"group {info.group}" if info.group else info.id
        for problem in info.problems:
            seen.setdefault((whose, problem.what), f"warning: {whose}: {problem}")
    return list(seen.values())


def state(info: TaskInfo) -> str:
    """docker's one-word state: created, running, paused, restarting or exited
    (``State.Status``, and what ``ps --filter status=`` matches); ctrexec's ``unknown``
    for a task whose shim did not answer (neither running for sure, nor gone)."""
    if info.status is Status.UNKNOWN:
        return "unknown"
    if info.status is Status.RUNNING:
        return "running"
    if info.status in (Status.PAUSED, Status.PAUSING):
        return "paused"
    if info.restarting and info.exit is not None:
        return "restarting"
    return "exited" if info.exit is not None else "created"


def _command(info: TaskInfo, *, trunc: bool = True) -> str:
    text = shlex.join(info.command_line)
    return f'"{text[:19]}…"' if trunc and len(text) > 20 else f'"{text}"'


def _labels(info: TaskInfo) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(info.config_labels.items()))


def _networks(info: TaskInfo) -> str:
    """docker's NETWORKS: the network's name (``run -p``'s, a group's), else the mode
    (``none``, ``host``, or ``path`` for a namespace given by path)."""
    return info.network or info.netns_mode


def _mounts(info: TaskInfo, *, trunc: bool = True) -> str:
    """docker's MOUNTS: each volume's source (a name or a host path), cut to 15
    characters unless ``--no-trunc``."""
    sources = [v.split(":", 1)[0] for v in info.config_volumes]
    return ",".join(f"{s[:14]}…" if trunc and len(s) > 15 else s for s in sources)


def _ports(info: TaskInfo) -> str:
    return ", ".join(
        f"{p.host_ip or '0.0.0.0'}:{p.host_port}->{p.container_port}/{p.protocol}"  # noqa: S104
        for p in info.ports
    )


#: ``ps --format`` fields, with the header ``table`` prints for each.
PS_FIELDS: dict[str, tuple[str, Callable[[TaskInfo, datetime], object]]] = {
    # The whole name: a cut one is not unique (a group's members share its prefix).
    "ID": ("CONTAINER ID", lambda i, _: i.id),
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
    "Networks": ("NETWORKS", lambda i, _: _networks(i)),
    "Mounts": ("MOUNTS", lambda i, _: _mounts(i)),
}
#: What ``ps --no-trunc`` shows instead: whole commands and mounts.
PS_UNTRUNCATED: dict[str, Callable[[TaskInfo, datetime], object]] = {
    "Command": lambda i, _: _command(i, trunc=False),
    "Mounts": lambda i, _: _mounts(i, trunc=False),
}
PS_DEFAULT = (
    "table {{.ID}}\t{{.Image}}\t{{.Command}}\t{{.RunningFor}}\t{{.Status}}\t{{.Ports}}"
    "\t{{.Names}}\t{{.Netns}}\t{{.Group}}"
)


def _iso(value: datetime | None) -> str:
    return value.isoformat() if value else ""


class _Row(Mapping[str, object]):
    """One ``ps`` row as a template sees it: every field, and docker's ``.Label "k"``.
    A field is worked out when the template reads it, so ``ps -q`` (``{{.ID}}``)
    reads nothing of a config and the default columns no label or volume."""

    def __init__(self, info: TaskInfo, now: datetime, *, trunc: bool = True) -> None:
        self._info, self._now = info, now
        self._fields = {n: get for n, (_, get) in PS_FIELDS.items()}
        if not trunc:
            self._fields.update(PS_UNTRUNCATED)
        self._fields["Label"] = lambda i, _: lambda key: i.config_labels.get(key, "")
        self._made: dict[str, object] = {}

    def __getitem__(self, name: str) -> object:
        if name not in self._made:
            self._made[name] = self._fields[name](self._info, self._now)
        return self._made[name]

    def __contains__(self, name: object) -> bool:
        return name in self._fields

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)


def _header() -> dict[str, object]:
    row: dict[str, object] = {name: header for name, (header, _) in PS_FIELDS.items()}
    row["Label"] = lambda _key: "LABEL"
    return row


def ps_template(template: str) -> tuple[bool, gotemplate.Template]:
    """Whether ``template`` is a ``table`` one, and its body parsed; unknown fields are
    refused here, before anything is listed (docker's errors, or ``unknown field``)."""
    table, parsed = table_template(template)
    known = {*PS_FIELDS, "Label"}
    for name in sorted(parsed.root_fields() - known):
        names = ", ".join(f".{f}" for f in PS_FIELDS)
        raise gotemplate.TemplateError(f"ps --format: unknown field .{name} (known: {names})")
    return table, parsed


def table_template(template: str) -> tuple[bool, gotemplate.Template]:
    """A listing's ``--format`` as docker reads it: ``json`` for ``{{json .}}``, ``\\t``
    and ``\\n`` typed literally, and ``table`` in front for a header."""
    if template.strip() == "json":  # docker's shorthand: each row as one JSON line
        template = "{{json .}}"
    template = template.replace("\\t", "\t").replace("\\n", "\n")
    table = template.startswith("table")
    body = template.removeprefix("table").strip() if table else template
    return table, parse_template(body)


def parse_template(text: str) -> gotemplate.Template:
    """A ``--format`` template, refused as docker says: ``template parsing error: ...``."""
    try:
        return gotemplate.parse(text)
    except gotemplate.TemplateError as exc:
        raise gotemplate.TemplateError(f"template parsing error: {exc}") from None


def execute(template: gotemplate.Template, data: object) -> str:
    """Run a template on one row or document, its errors worded as docker's."""
    try:
        return template.execute(data)
    except gotemplate.TemplateError as exc:
        raise gotemplate.TemplateError(f"template parsing error: {exc}") from None


def ps_lines(
    infos: Sequence[TaskInfo], template: str, now: datetime | None = None, *, trunc: bool = True
) -> list[str]:
    """The ``ps`` output lines for ``template``; a ``table`` one aligned under a header.

    ``trunc`` cuts commands to 20 characters, as docker's ``ps`` does. Ids are never
    cut: docker's are random hex, unique in 12 characters, but ctrexec's ids are names,
    whose first 12 characters many share (``my-service-alpha-1`` and ``-2``, a group's
    members), and ``rm -f $(ctrexec ps -aq)`` must name each container.
    """
    now = now or datetime.now(UTC)
    table, parsed = ps_template(template)
    rows = [_Row(i, now, trunc=trunc) for i in infos]
    return render(parsed, rows, _header() if table else None)


def render(parsed: gotemplate.Template, rows: Sequence[object], header: object | None) -> list[str]:
    """A template's lines, one a row; with a ``header`` (a ``table`` template), that
    header first and every ``\t``-separated column aligned, as docker's tabwriter."""
    lines = [execute(parsed, row) for row in rows]
    if header is None:
        return lines
    cells = [c.split("\t") for c in [execute(parsed, header), *lines]]
    widths = [max(len(r[i]) if i < len(r) else 0 for r in cells) for i in range(len(cells[0]))]
    return ["   ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in cells]


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
