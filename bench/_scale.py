"""bench/scale's rows: what each side runs at N containers, timed in interleaved rounds.

Populations (N running containers of one side) are made before a round's timed part and
removed after it, never timed; bench/scale's docstring says what each row runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import _scenarios as sc
from _common import BenchError, ctr_remove, memory_of, run, run_parallel, timed_ms, wait_until
from _docker import IMAGE as DOCKER_IMAGE

from ctrexec.cli.client import SERVER_DIR_ENV
from ctrexec.containerd.client import Client
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.supervised import is_supervised
from ctrexec.testing import audit

#: ctr's containers live in a namespace of their own, so that no ctrexec listing sees them.
CTR_NAMESPACE = "ctrexec-bench-ctr"
#: The docker CLIs the read rows compare with; both talk to the same (Debian's) dockerd.
DOCKER_CLIS = {"docker 28": "/usr/local/bin/docker", "docker 20.10": "/usr/bin/docker"}
#: The CLI of the rows that are not about reading (rm, groups): the current one.
DOCKER_MAIN = "docker 28"
SLEEP = ("sleep", "1000000")
#: A group member that exits at SIGTERM at once (a shell as PID 1 with a trap; plain
#: ``sleep`` as PID 1 ignores TERM, and every ``down`` would then be a stop timeout).
QUICK_TERM = ("sh", "-c", "trap 'exit 0' TERM; sleep 1000000 & wait")
INSPECT_MANY = 20
#: How many containers a population starts at once (processes or threads): enough to
#: keep 2 cores busy, few enough not to time out dockerd.
POPULATE_AT_ONCE = 4
#: How many of a group's members docker and ctr start at once (bench/run's burst is
#: 50): 300 CLI processes at once would time out dockerd on 2 cores, not measure it.
GROUP_AT_ONCE = 50
GROUP_PREFIX = "cxb-g"  # a group's namespace is cx-NAME (ctrexec.net.holders)
SUPERVISOR_TIMEOUT = 30.0

Samples = dict[str, list[float]]
#: The sides of the removal rows and the keys of the group rows' samples.
RM_SIDES = ("ctrexec", "docker", "ctr")
SUPERVISED_SIDES = ("ctrexec", "docker")
GROUP_KEYS = tuple(f"{phase} {side}" for phase in ("up", "down") for side in RM_SIDES)


@dataclass
class Scale:
    """The three sides on one containerd: ctrexec (``b``, its CLI and library), ctr in
    CTR_NAMESPACE, docker through both of its CLIs."""

    b: sc.Bench
    ctr_client: Client
    log_dir: Path
    #: Lines printed under the table: the supervisor's memory, and its exit if it died.
    notes: list[str] = field(default_factory=list)

    # -- commands -------------------------------------------------------------------

    def cli(self, verb: str, *args: str) -> list[str]:
        verbs = verb.split()
        return [sc.CTREXEC_CLI, *verbs, *self.b.cli_conn(), *args]

    def docker(self, which: str, *args: str) -> list[str]:
        return [DOCKER_CLIS[which], "-H", f"unix://{self.b.docker.sock}", *args]

    def ctr(self, *args: str, namespace: str = CTR_NAMESPACE) -> list[str]:
        return ["ctr", "-a", self.b.address, "-n", namespace, *args]

    def env(self) -> dict[str, str]:
        return self.b.cli_env(inproc=False)

    # -- populations (never timed) ----------------------------------------------------

    def ctrexec_up(self, names: Sequence[str], *, restart: str = "no") -> None:
        """N running ``sleep`` containers through the library, as ``run -d`` makes them
        (the log directory the CLI rows name, the default host files)."""

        def one(name: str) -> None:
            self.b.ex.start_task(
                TaskConfig(name=name, image=sc.IMAGE, command=SLEEP, restart={"policy": restart})
            )

        with ThreadPoolExecutor(max_workers=POPULATE_AT_ONCE) as pool:
            for f in [pool.submit(one, n) for n in names]:
                f.result()

    def docker_up(self, names: Sequence[str], *, restart: str = "no") -> None:
        cmds = [
            self.docker(DOCKER_MAIN, "run", "-d", "--name", n, "--network=none",
                        f"--restart={restart}", DOCKER_IMAGE, *SLEEP)
            for n in names
        ]  # fmt: skip
        in_batches(cmds, self.b.docker.env)

    def ctr_up(self, names: Sequence[str]) -> None:
        fifo = str(self.b.fifo_dir)
        in_batches([self.ctr("run", "-d", "--fifo-dir", fifo, sc.IMAGE, n, *SLEEP) for n in names])

    def ctr_remove(self, names: Sequence[str]) -> None:
        ctr_remove(self.ctr, names)

    def ctr_names(self) -> list[str]:
        return run(self.ctr("containers", "ls", "-q")).stdout.split()

    def cleanup(self) -> None:
        self.b.cleanup()
        self.ctr_remove(self.ctr_names())

    def check_clean(self, what: str) -> None:
        self.b.check_clean(what)
        left = audit(self.ctr_client)
        if left:
            raise BenchError(f"after {what}, left in {CTR_NAMESPACE}: {left}")


def in_batches(
    cmds: Sequence[Sequence[str]], env: dict[str, str] | None = None, size: int = POPULATE_AT_ONCE
) -> None:
    for i in range(0, len(cmds), size):
        run_parallel(cmds[i : i + size], env)


def check_server() -> None:
    """The ctrexec rows time the script as installed: through a command server, which
    the warm-up started. Without one they would time in-process starts; say so."""
    directory = Path(os.environ[SERVER_DIR_ENV])
    if not any(directory.glob("*.pid")):
        raise BenchError(f"no command server in {directory} after the warm-up")


def names_of(n: int, prefix: str = "sc") -> list[str]:
    return [f"{prefix}-{i}" for i in range(n)]


def run_ok(cmd: Sequence[str], env: dict[str, str], codes: tuple[int, ...] = (0,)) -> None:
    """``run``, where some non-zero codes are answers (doctor exits 1 on a finding)."""
    proc = subprocess.run(list(cmd), capture_output=True, text=True, check=False, env=env)
    if proc.returncode not in codes:
        raise BenchError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")


# -- the read rows -------------------------------------------------------------------


def read_commands(s: Scale, n: int) -> dict[str, tuple[list[str], dict[str, str], tuple[int, ...]]]:
    """Row key -> command, environment, accepted exit codes; over N of each side."""
    env, denv, ok = s.env(), s.b.docker.env, (0,)
    many = names_of(min(INSPECT_MANY, n))
    logs = ["--log-dir", str(s.log_dir)]
    cmds: dict[str, tuple[list[str], dict[str, str], tuple[int, ...]]] = {}
    for flags in ((), ("-a",), ("-q",)):
        key = " ".join(("ps", *flags))
        cmds[f"ctrexec {key}"] = (s.cli("ps", *flags), env, ok)
        for which in DOCKER_CLIS:
            cmds[f"{which} {key}"] = (s.docker(which, "ps", *flags), denv, ok)
    own = {"namespace": sc.NAMESPACE}  # ctr over ctrexec's N, as context
    cmds["ctr tasks ls"] = (s.ctr("tasks", "ls", **own), env, ok)
    cmds["ctr containers ls"] = (s.ctr("containers", "ls", **own), env, ok)
    for key, names in (("inspect ONE", many[:1]), (f"inspect {len(many)}", many)):
        cmds[f"ctrexec {key}"] = (s.cli("inspect", *names), env, ok)
        for which in DOCKER_CLIS:
            cmds[f"{which} {key}"] = (s.docker(which, "inspect", *names), denv, ok)
    cmds["ctrexec doctor"] = (s.cli("doctor", *logs), env, (0, 1))
    cmds["ctrexec gc --dry-run"] = (s.cli("gc", "--dry-run", *logs), env, (0, 1))
    return cmds


def reads(s: Scale, n: int, rounds: int) -> Samples:
    """Every read command over N running containers of ctrexec and of docker."""
    names = names_of(n)
    s.ctrexec_up(names)
    s.docker_up(names)
    try:
        cmds = read_commands(s, n)
        for cmd, env, codes in cmds.values():
            run_ok(cmd, env, codes)  # warm: the page cache, the command server
        check_server()
        out: Samples = {k: [] for k in cmds}
        for _ in range(rounds):
            for key, (cmd, env, codes) in cmds.items():
                out[key].append(timed_ms(partial(run_ok, cmd, env, codes)))
    finally:
        s.cleanup()
    s.check_clean(f"reads at N={n}")
    return out


# -- removal -------------------------------------------------------------------------


def _rotated(
    methods: Mapping[str, Callable[[], float]], i: int
) -> list[tuple[str, Callable[[], float]]]:
    """The methods in turn, starting one further each round (no side always first)."""
    items = list(methods.items())
    k = i % len(items)
    return items[k:] + items[:k]


def remove_n(s: Scale, n: int, rounds: int) -> Samples:
    """``rm -f`` of N running ``sleep`` containers, each side with only its own N up."""
    names = names_of(n, "rm")

    def ctrexec() -> float:
        s.ctrexec_up(names)
        return timed_ms(partial(run, s.cli("rm", "-f", *names), s.env()))

    def docker() -> float:
        s.docker_up(names)
        return timed_ms(partial(run, s.docker(DOCKER_MAIN, "rm", "-f", *names), s.b.docker.env))

    def ctr() -> float:
        s.ctr_up(names)
        return timed_ms(partial(s.ctr_remove, names))

    methods = dict(zip(RM_SIDES, (ctrexec, docker, ctr), strict=True))
    out: Samples = {k: [] for k in methods}
    try:
        for i in range(rounds):
            for key, fn in _rotated(methods, i):
                out[key].append(fn())
                s.check_clean(f"rm -f of {n}, {key}")
    finally:
        s.cleanup()
    return out


@contextlib.contextmanager
def supervisor(s: Scale, log: Path, n: int) -> Iterator[subprocess.Popen[bytes]]:
    """``ctrexec supervise`` for the namespace, in its own session, stopped by its pid.

    Its death during the row is a finding (issue 40 saw its event stream crash in a
    removal storm), written under the table, not the end of the run.
    """
    argv = s.cli("supervise", "--log-dir", str(s.log_dir))
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=s.env(),
                                start_new_session=True)  # fmt: skip
    try:
        wait_until(lambda: _serving(s, proc), SUPERVISOR_TIMEOUT, "the supervisor")
        yield proc
    finally:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-300:].strip().replace("\n", " / ")
            s.notes.append(f"N={n}: `ctrexec supervise` exited {proc.returncode} during the "
                           f"row (figures after that were not supervised): ...{tail}")  # fmt: skip
        else:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(SUPERVISOR_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                s.notes.append(f"N={n}: `ctrexec supervise` did not stop on SIGTERM; killed")


def supervisor_pss(s: Scale, proc: subprocess.Popen[bytes], when: str) -> None:
    if proc.poll() is None:
        mib = memory_of([proc.pid]).pss / 1024
        s.notes.append(f"`ctrexec supervise` PSS, {when}: {mib:.1f} MiB")


def _serving(s: Scale, proc: subprocess.Popen[bytes]) -> bool:
    if proc.poll() is not None:
        raise BenchError(f"ctrexec supervise exited {proc.returncode} at its start")
    return is_supervised(s.b.client)


def remove_supervised(s: Scale, n: int, rounds: int, tmp: Path) -> Samples:
    """``rm -f`` of N ``--restart always`` containers, ``ctrexec supervise`` running,
    against docker's (dockerd is its own supervisor)."""
    names = names_of(n, "rs")

    def ctrexec() -> float:
        s.ctrexec_up(names, restart="always")
        return timed_ms(partial(run, s.cli("rm", "-f", *names), s.env()))

    def docker() -> float:
        s.docker_up(names, restart="always")
        return timed_ms(partial(run, s.docker(DOCKER_MAIN, "rm", "-f", *names), s.b.docker.env))

    methods = dict(zip(SUPERVISED_SIDES, (ctrexec, docker), strict=True))
    out: Samples = {k: [] for k in methods}
    try:
        with supervisor(s, tmp / f"supervise-{n}.log", n) as proc:
            supervisor_pss(s, proc, f"N={n}, idle")
            for i in range(rounds):
                for key, fn in _rotated(methods, i):
                    out[key].append(fn())
                    s.check_clean(f"rm -f of {n} supervised, {key}")
            supervisor_pss(s, proc, f"N={n}, after {rounds} rounds")
    finally:
        s.cleanup()
    return out


# -- groups --------------------------------------------------------------------------


def group_file(path: Path, name: str, n: int) -> Path:
    """A group file of N members (TOML's basic strings are JSON's)."""
    member = f'image = "{sc.IMAGE}"\ncommand = {json.dumps(list(QUICK_TERM))}\n'
    tasks = "".join(f'\n[[task]]\nname = "m{i}"\n{member}' for i in range(n))
    path.write_text(f'name = "{name}"\nnetwork = "none"\n{tasks}')
    return path


def groups(s: Scale, n: int, rounds: int, tmp: Path) -> Samples:
    """``group up`` of N members, then ``group down``, against docker + pause and ctr."""
    out: Samples = {k: [] for k in GROUP_KEYS}
    denv = s.b.docker.env
    try:
        for r in range(rounds):
            name = f"{GROUP_PREFIX}{n}-{r}"
            spec = group_file(tmp / f"{name}.toml", name, n)
            pause, members = f"{name}-pause", [f"{name}-d{i}" for i in range(n)]
            ns, tasks = f"{name}-ctr", [f"{name}-c{i}" for i in range(n)]

            def docker_up(pause: str = pause, members: list[str] = members) -> None:
                run(s.docker(DOCKER_MAIN, "run", "-d", "--name", pause, "--network=none",
                             DOCKER_IMAGE, *QUICK_TERM), denv)  # fmt: skip
                in_batches([
                    s.docker(DOCKER_MAIN, "run", "-d", "--name", m,
                             f"--network=container:{pause}", DOCKER_IMAGE, *QUICK_TERM)
                    for m in members
                ], denv, GROUP_AT_ONCE)  # fmt: skip

            def ctr_up(ns: str = ns, tasks: list[str] = tasks) -> None:
                run(["ip", "netns", "add", ns])
                s.b.ctr_netns.append(ns)
                fifo = str(s.b.fifo_dir)
                in_batches([
                    s.ctr("run", "-d", "--fifo-dir", fifo, "--with-ns",
                          f"network:/run/netns/{ns}", sc.IMAGE, t, *QUICK_TERM)
                    for t in tasks
                ], None, GROUP_AT_ONCE)  # fmt: skip

            def docker_down(pause: str = pause, members: list[str] = members) -> None:
                run(s.docker(DOCKER_MAIN, "stop", *members, pause), denv)
                run(s.docker(DOCKER_MAIN, "rm", *members, pause), denv)

            def ctr_down(ns: str = ns, tasks: list[str] = tasks) -> None:
                s.ctr_remove(tasks)
                run(["ip", "netns", "del", ns])
                s.b.ctr_netns.remove(ns)

            cli_up = s.cli("group up", "-q", "--pull", "never", "--log-dir", str(s.log_dir))
            cli_down = s.cli("group down", "--log-dir", str(s.log_dir), name)
            ups: dict[str, Callable[[], object]] = {
                "up ctrexec": partial(run, [*cli_up, str(spec)], s.env()),
                "up docker": docker_up,
                "up ctr": ctr_up,
            }
            downs: dict[str, Callable[[], object]] = {
                "down ctrexec": partial(run, cli_down, s.env()),
                "down docker": docker_down,
                "down ctr": ctr_down,
            }
            for phase in (ups, downs):
                timed = {k: partial(timed_ms, fn) for k, fn in phase.items()}
                for key, fn in _rotated(timed, r):
                    out[key].append(fn())
            s.check_clean(f"groups of {n}, round {r}")
    finally:
        s.cleanup()
    return out
