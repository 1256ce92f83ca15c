"""The tables bench/run prints: issues 9's and 24's targets with ratios, and the details."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from _common import KIB_PER_MIB, NA, MemResult, fmt_mib, fmt_ms, percentile
from _scenarios import CLI_MODES, HEAVY, READS, STOPPED, Samples

HELP_TARGET_MS = 40.0  # issue 24
#: How each CLI mode is named in a row.
CLI_LABELS = {"cli": "as installed", "cli-inproc": "`CTREXEC_NO_SERVER=1`"}
#: ctrexec's memory scenarios: one group per ``--log-driver``, then a shim per task.
MEMORY_LIB = ("group", "group-process", "group-file", "group-none", "single")
#: The column of each memory scenario in the details table.
MEMORY_COLUMNS = {
    "group": "ctrexec, shared shim (json-file, log daemon)",
    "group-process": "shared shim, json-file, transport=process",
    "group-file": "shared shim, --log-driver file",
    "group-none": "shared shim, --log-driver none",
    "single": "ctrexec, shim per task",
    "ctr": "ctr",
    "docker": "docker + pause",
}
Table = tuple[tuple[str, ...], list[tuple[str, ...]]]


@dataclass
class Results:
    n: int
    group_size: int
    burst: int
    samples: dict[str, Samples] = field(default_factory=dict)
    mem: dict[str, MemResult] = field(default_factory=dict)
    imports: dict[str, list[str]] = field(default_factory=dict)
    docker_fails: tuple[int, int] = (0, 0)
    pull_image: str = ""  # what the pull row pulled (empty: the row did not run)

    def set_startup(self, samples: Samples, imports: dict[str, list[str]]) -> None:
        self.samples["startup"] = samples
        self.imports = imports

    def set_restart(self, samples: Samples, fails: int, attempts: int) -> None:
        self.samples["restart"] = samples
        self.docker_fails = (fails, attempts)

    def med(self, scenario: str, key: str) -> float:
        return statistics.median(self.samples[scenario][key])

    def per_task_pss(self, how: str) -> float:
        """KiB of PSS per task: shims (their share), log drivers or the log daemon,
        docker's pause."""
        m = self.mem[how]
        return (m.shims.pss + m.drivers.pss + m.extra.pss) / self.group_size


def _verdict(ratio: float, bound: float, *, at_least: bool = False) -> str:
    ok = ratio >= bound if at_least else ratio <= bound
    return "met" if ok else "missed"


def _ratio_row(
    measure: str, mine: float, peer: str, theirs: float, *, target: str, unit: str = "ms"
) -> tuple[str, ...]:
    """A row with ctrexec / peer; ``target`` is "<= 0.8" style or "" (context only)."""
    ratio = mine / theirs
    verdict = NA
    if target:
        op, bound = target.split()
        verdict = _verdict(ratio, float(bound), at_least=op == ">=")
    fmt = "{:.1f}" if unit != "ms" else "{:.0f}"
    return (
        measure,
        f"{fmt.format(mine)} {unit}",
        peer,
        f"{fmt.format(theirs)} {unit}",
        f"{ratio:.2f}x",
        f"{target}x" if target else NA,
        verdict,
    )


def _startup_rows(r: Results) -> list[tuple[str, ...]]:
    """``--help`` (absolute), then each read-only command against docker's (issue 24)."""
    rows: list[tuple[str, ...]] = []
    heavy = r.imports.get("--help", [])
    imports = ", ".join(heavy) if heavy else "none of " + "/".join(HEAVY)
    for mode in CLI_MODES:
        mine = r.med("startup", f"{mode}-help")
        for peer in ("ctr", "docker"):
            theirs = r.med("startup", f"{peer}-help")
            rows.append(
                (
                    f"`ctrexec --help`, {CLI_LABELS[mode]} (in-process imports: {imports})",
                    f"{mine:.0f} ms",
                    f"`{peer} --help`",
                    f"{theirs:.0f} ms",
                    f"{mine / theirs:.2f}x",
                    f"<= {HELP_TARGET_MS:.0f} ms, no heavy import",
                    "met" if mine <= HELP_TARGET_MS and not heavy else "missed",
                )
            )
    for key, (args, docker_args) in READS.items():
        if key == "help":
            continue
        for mode in CLI_MODES:
            shown = " ".join(args).replace(STOPPED, "STOPPED")
            peer = " ".join(docker_args).replace(STOPPED, "STOPPED")
            label = f"CLI `{shown}`, {CLI_LABELS[mode]}"
            mine = r.med("startup", f"{mode}-{key}")
            rows.append(
                _ratio_row(label, mine, f"`docker {peer}`", r.med("startup", f"docker-{key}"),
                           target="<= 1.2")
            )  # fmt: skip
            if key == "version":
                rows.append(
                    _ratio_row(label, mine, "`ctr version`", r.med("startup", "ctr-version"),
                               target="")
                )  # fmt: skip
    return rows


def _cli_rows(r: Results) -> list[tuple[str, ...]]:
    """The CLI's ``run --rm`` and 1-task group, both ways, against docker and ctr."""
    ctr_group = "`ip netns add` + `ctr run -d --with-ns`"
    docker1 = "docker + pause (pause + 1 joined)"
    rows: list[tuple[str, ...]] = []
    for mode in CLI_MODES:
        how = CLI_LABELS[mode]
        g1, rm = r.med("group1", mode), r.med("rm", mode)
        rows += [
            _ratio_row(f"CLI `netns create` + `run -d --netns`, {how}", g1, docker1,
                       r.med("group1", "docker"), target="<= 0.5"),
            _ratio_row(f"CLI `netns create` + `run -d --netns`, {how}", g1, ctr_group,
                       r.med("group1", "ctr"), target="<= 1.5"),
            _ratio_row(f"CLI `run --rm IMAGE true`, {how}", rm, "`docker run --rm`",
                       r.med("rm", "docker"), target="<= 1.0"),
            _ratio_row(f"CLI `run --rm IMAGE true`, {how}", rm, "`ctr run --rm`",
                       r.med("rm", "ctr"), target="<= 1.5"),
        ]  # fmt: skip
    if r.pull_image:
        rows.append(
            _ratio_row(f"`ctrexec pull -q` of the bench image set ({r.pull_image})",
                       r.med("pull", "ctrexec"), "`ctr images pull --plain-http`",
                       r.med("pull", "ctr"), target="<= 0.9")
        )  # fmt: skip
    return rows


def targets(r: Results) -> Table:
    header = ("measure", "ctrexec", "peer", "peer value", "ctrexec / peer", "target", "met")
    g1, g3 = "group1", "group3"
    ctr_group = "`ip netns add` + `ctr run -d --with-ns`"
    docker1 = "docker + pause (pause + 1 joined)"
    rows = [
        *_cli_rows(r),
        *_startup_rows(r),
        _ratio_row("library, 1-task group (new namespace + task)", r.med(g1, "lib"), ctr_group,
                   r.med(g1, "ctr"), target="<= 0.8"),
        _ratio_row("library, 1-task group (new namespace + task)", r.med(g1, "lib"), docker1,
                   r.med(g1, "docker"), target=""),
        _ratio_row("library, one task into an existing namespace", r.med("exist", "lib"),
                   "`ctr run -d --with-ns` (existing)", r.med("exist", "ctr"), target="<= 0.9"),
        _ratio_row("library, start + wait + destroy of `true`", r.med("rm", "lib"),
                   "`ctr run --rm`", r.med("rm", "ctr"), target="<= 1.0"),
        _ratio_row("library, 3-task group, tasks started concurrently", r.med(g3, "lib"),
                   "docker + pause, 3 joined at once", r.med(g3, "docker"), target="<= 0.25"),
        _ratio_row("Nomad driver StartTask, 1-task group (namespace + task)",
                   r.med("nomad", "nomad"), ctr_group, r.med("nomad", "ctr"), target=""),
        _ratio_row("library, 3-task group, tasks started concurrently", r.med(g3, "lib"),
                   "`ip netns add` + 3 `ctr run -d --with-ns`", r.med(g3, "ctr"), target=""),
        _ratio_row(f"library, {r.burst} groups started at once, groups/s",
                   r.med("burst", "lib"), f"{r.burst} parallel `ctr run -d`",
                   r.med("burst", "ctr"), target=">= 1.4", unit="/s"),
        _ratio_row(f"library, {r.burst} groups started at once, groups/s",
                   r.med("burst", "lib"), f"{r.burst} parallel `ctr run -d --seccomp`",
                   r.med("burst", "ctr-seccomp"), target="", unit="/s"),
        _ratio_row("restart of a killed task into its group", r.med("restart", "lib"),
                   "docker, pause alive: `docker start`", r.med("restart", "docker"), target=""),
    ]  # fmt: skip
    fails, attempts = r.docker_fails
    rows.append(
        (
            "restart of a killed task into its group",
            f"{r.med('restart', 'lib'):.0f} ms",
            "docker, pause killed too: `docker start`",
            f"fails ({fails}/{attempts})" if fails else "did not fail",
            NA,
            "docker fails",
            "met" if fails == attempts else "missed",
        )
    )
    for mode, driver in (
        ("group", "json-file"),
        ("group-process", "json-file, transport=process"),
        ("group-file", "file"),
        ("group-none", "none"),
    ):
        mine = r.per_task_pss(mode) / KIB_PER_MIB
        for how, peer, target in (
            ("ctr", "ctr: shim per task", "<= 1.0"),
            ("docker", "docker: shim per container + pause's share", ""),
        ):
            rows.append(
                _ratio_row(
                    f"per-task PSS, grouped task: shim share + log process (`{driver}`)",
                    mine, peer, r.per_task_pss(how) / KIB_PER_MIB,
                    target=target, unit="MiB",
                )
            )  # fmt: skip
    return header, rows


def _latency_details(r: Results) -> list[tuple[str, ...]]:
    labels = {
        "rm": "run --rm `true`",
        "group1": "1-task group",
        "nomad": "Nomad StartTask, 1-task group",
        "exist": "task into existing namespace",
        "group3": "3-task group",
        "restart": "restart of a killed task",
        "startup": "start-up and reads",
        "pull": "pull of the bench image set",
    }
    rows: list[tuple[str, ...]] = []
    for scenario, label in labels.items():
        for key, values in r.samples.get(scenario, {}).items():
            rows.append(
                (f"{label}: {key}", fmt_ms(values, "median"), fmt_ms(values, "p90"),
                 f"{min(values):.0f}", str(len(values)))
            )  # fmt: skip
    for key, values in r.samples.get("burst", {}).items():
        rows.append(
            (f"{r.burst} at once, groups/s: {key}", f"{statistics.median(values):.1f}",
             f"{percentile(values, 10):.1f}", f"{min(values):.1f}", str(len(values)))
        )  # fmt: skip
    return rows


def details(r: Results) -> tuple[Table, Table]:
    lat = (("latency, ms", "median", "p90 (rates: p10)", "min", "n"), _latency_details(r))
    order = [k for k in MEMORY_COLUMNS if k in r.mem]
    header = (
        f"memory, {r.group_size} tasks in one group",
        *(MEMORY_COLUMNS[k] for k in order),
    )
    g = r.group_size

    def row(label: str, fn: object) -> tuple[str, ...]:
        assert callable(fn)
        return (label, *(str(fn(r.mem[k])) for k in order))

    mem_rows = [
        row("shim processes", lambda m: m.shims.count),
        row("shims RSS total, MiB", lambda m: fmt_mib(m.shims.rss)),
        row("shims PSS total, MiB", lambda m: fmt_mib(m.shims.pss)),
        row("shims Private_Dirty total, MiB", lambda m: fmt_mib(m.shims.dirty)),
        row("log driver processes", lambda m: m.drivers.count),
        row("log drivers PSS total, MiB", lambda m: fmt_mib(m.drivers.pss)),
        row("pause process PSS, MiB", lambda m: fmt_mib(m.extra.pss)),
        row("PSS per task (all of the above / tasks), MiB",
            lambda m: fmt_mib((m.shims.pss + m.drivers.pss + m.extra.pss) / g)),
        row("Private_Dirty per task, MiB",
            lambda m: fmt_mib((m.shims.dirty + m.drivers.dirty + m.extra.dirty) / g)),
        row("other runc v2 shims on the host then", lambda m: m.other_shims),
    ]  # fmt: skip
    return lat, (header, mem_rows)


def tables(r: Results) -> list[Table]:
    lat, mem = details(r)
    return [targets(r), lat, mem]


def render_text(table: Table) -> str:
    header, rows = table
    cells = [header, *rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = []
    for n, r in enumerate(cells):
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_markdown(table: Table) -> str:
    header, rows = table
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def render_all(tables_: Sequence[Table], markdown: bool) -> str:
    render = render_markdown if markdown else render_text
    return "\n\n".join(render(t) for t in tables_)
