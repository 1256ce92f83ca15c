"""The measured scenarios: each method takes turns within every round, so background
load hits them alike; set-up and removal stay outside the timed part."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from _common import (
    BenchError,
    MemResult,
    ctr_remove,
    log_daemon_pids,
    logdriver_pids,
    memory_of,
    run,
    run_parallel,
    shim_pids,
    timed_ms,
    wait_until,
)
from _docker import IMAGE as DOCKER_IMAGE
from _docker import Dockerd, restart_attempt, wait_exited

from ctrexec.containerd.client import Client
from ctrexec.logs import client as logdaemon_client
from ctrexec.net import netns
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor
from ctrexec.testing import audit

NAMESPACE = "ctrexec-bench"
IMAGE = "docker.io/library/ctrexec-test:latest"
CTREXEC_CLI = str(Path(sys.executable).parent / "ctrexec")
NS_PREFIX = "cxb-"  # every network namespace the benchmark makes
SETTLE_SECONDS = 1.0
GONE_TIMEOUT = 15.0
SLEEP = ("sleep", "600")
HEAVY = ("grpc", "google.protobuf", "pyroute2", "ctrexec._api")
#: Set to 1, the ``ctrexec`` script runs the command in its own process instead of
#: asking the command server (issue 24); unset, it is the path a user gets.
NO_SERVER = "CTREXEC_NO_SERVER"
#: The two ways the CLI rows run ``ctrexec``: as installed (through the command server
#: where there is one; the first command starts it, so every row warms up first), and
#: in-process. Sample keys are "cli" and "cli-inproc".
CLI_MODES = {"cli": False, "cli-inproc": True}
STOPPED = "cxb-stopped"  # the stopped task the inspect and logs rows read

Samples = dict[str, list[float]]


@dataclass
class Bench:
    address: str
    client: Client
    ex: Executor
    fifo_dir: Path
    cli_log_dir: Path
    docker: Dockerd
    ctr_netns: list[str] = field(default_factory=list)

    def cli_env(self, inproc: bool) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != NO_SERVER}
        return {**env, NO_SERVER: "1"} if inproc else env

    # -- ctr --------------------------------------------------------------------------

    def ctr(self, *args: str) -> list[str]:
        return ["ctr", "-a", self.address, "-n", NAMESPACE, *args]

    def ctr_run(
        self, name: str, *, ns: str | None = None, rm: bool = False, seccomp: bool = False
    ) -> list[str]:
        extra = ["--with-ns", f"network:/run/netns/{ns}"] if ns else []
        extra += ["--seccomp"] if seccomp else []
        mode = "--rm" if rm else "-d"
        cmd = ("true",) if rm else SLEEP
        return self.ctr("run", mode, "--fifo-dir", str(self.fifo_dir), *extra, IMAGE, name, *cmd)

    def ip_netns_add(self, name: str) -> None:
        run(["ip", "netns", "add", name])
        self.ctr_netns.append(name)

    def ctr_group(self, name: str, tasks: int = 1) -> None:
        """``ip netns add``, then the tasks at once with ``--with-ns`` (ctr's group)."""
        self.ip_netns_add(name)
        cmds = [self.ctr_run(f"{name}-{i}", ns=name) for i in range(tasks)]
        if tasks == 1:
            run(cmds[0])
        else:
            run_parallel(cmds)

    def ctr_remove(self, names: Sequence[str]) -> None:
        ctr_remove(self.ctr, names)

    def ctr_cleanup(self) -> None:
        """After lib_cleanup, every container left in the namespace is ctr's."""
        self.ctr_remove(run(self.ctr("containers", "ls", "-q")).stdout.split())
        for ns in self.ctr_netns:
            run(["ip", "netns", "del", ns])
        self.ctr_netns.clear()

    # -- ctrexec CLI --------------------------------------------------------------------

    def cli(self, *args: str) -> list[str]:
        return [CTREXEC_CLI, *args]

    def cli_conn(self) -> list[str]:
        return ["--address", self.address, "--namespace", NAMESPACE]

    def cli_run_rm(self, name: str, inproc: bool = False) -> None:
        run(
            self.cli("run", "--rm", *self.cli_conn(), "--log-dir", str(self.cli_log_dir),
                     "--name", name, IMAGE, "true"),
            self.cli_env(inproc),
        )  # fmt: skip

    def cli_group(self, name: str, inproc: bool = False) -> None:
        """``ctrexec netns create`` + ``ctrexec run -d --netns`` (a 1-task group)."""
        env = self.cli_env(inproc)
        run(self.cli("netns", "create", name), env)
        run(
            self.cli("run", "-d", *self.cli_conn(), "--log-dir", str(self.cli_log_dir),
                     "--name", name, "--netns", name, IMAGE, *SLEEP),
            env,
        )  # fmt: skip

    # -- library ------------------------------------------------------------------------

    def lib_task(self, name: str, *, ns: str | None = None, group: str | None = None) -> None:
        self.ex.start_task(
            TaskConfig(name=name, image=IMAGE, command=SLEEP, netns=ns or "none", group=group)
        )

    def lib_run_rm(self, name: str) -> None:
        self.ex.start_task(TaskConfig(name=name, image=IMAGE, command=("true",)))
        status = self.ex.wait(name, timeout=30)
        self.ex.destroy(name)
        if status.exit_code != 0:
            raise BenchError(f"{name}: true exited {status.exit_code}")

    def lib_group(self, name: str, tasks: int = 1) -> None:
        """A new pinned namespace, then ``tasks`` tasks started at once (threads)."""
        netns.create(name)
        if tasks == 1:
            self.lib_task(name, ns=name, group=name)
            return
        with ThreadPoolExecutor(max_workers=tasks) as pool:
            futures = [
                pool.submit(self.lib_task, f"{name}-{i}", ns=name, group=name) for i in range(tasks)
            ]
            for f in futures:
                f.result()

    def lib_cleanup(self) -> None:
        """Every ctrexec task, then every namespace of ours."""
        for info in self.ex.list(all_tasks=True):
            self.ex.destroy(info.id, force=True)
        for ns in netns.list_namespaces():
            if ns.name.startswith(NS_PREFIX) and ns.name not in self.ctr_netns:
                netns.remove(ns.path)

    # -- everything ---------------------------------------------------------------------

    def cleanup(self) -> None:
        self.lib_cleanup()
        self.ctr_cleanup()
        self.docker.remove(self.docker.containers())

    def check_clean(self, what: str) -> None:
        wait_until(lambda: not shim_pids(self.address), GONE_TIMEOUT, f"shims to exit ({what})")
        left = audit(self.client)
        left += [f"log daemon registration {r}" for r in logdaemon_client.registrations()]
        if self.docker.containers():
            left.append(f"docker containers {self.docker.containers()}")
        if left:
            raise BenchError(f"after {what}, left: {left}")


def rounds(
    n: int, methods: dict[str, Callable[[str], object]], after: Callable[[], None]
) -> Samples:
    """``n`` interleaved rounds; method(name) is timed, ``after`` cleans up each round."""
    out: Samples = {k: [] for k in methods}
    for i in range(n):
        for key, fn in methods.items():
            out[key].append(timed_ms(partial(fn, f"{NS_PREFIX}{key}-{i}")))
        after()
    return out


# -- scenarios -----------------------------------------------------------------------


def run_rm(b: Bench, n: int) -> Samples:
    """``run --rm IMAGE true``: ctr's, docker's, the CLI both ways, the library's."""

    def docker(name: str) -> None:
        run(b.docker.cli("run", "--rm", "--network=none", DOCKER_IMAGE, "true"), b.docker.env)

    run(b.ctr_run("warm-ctr", rm=True))
    docker("warm-docker")
    for key, inproc in CLI_MODES.items():
        b.cli_run_rm(f"warm-{key}", inproc)
    b.lib_run_rm("warm-lib")
    methods: dict[str, Callable[[str], object]] = {
        "ctr": lambda name: run(b.ctr_run(name, rm=True)),
        "docker": docker,
    }
    for key, inproc in CLI_MODES.items():
        methods[key] = partial(_strip_prefix, partial(b.cli_run_rm, inproc=inproc))
    methods["lib"] = partial(_strip_prefix, b.lib_run_rm)
    out = rounds(n, methods, lambda: None)
    b.check_clean("run --rm")
    return out


def _strip_prefix(fn: Callable[[str], object], name: str) -> object:
    """Container names without the namespace prefix (the CLI's and library's ``true``)."""
    return fn(name.replace(NS_PREFIX, ""))


def one_task_group(b: Bench, n: int) -> Samples:
    """The CLI (both ways) and library 1-task groups against ctr's and docker's."""

    def docker(name: str) -> None:
        b.docker.pause(f"{name}-pause")
        b.docker.join([name], f"{name}-pause", SLEEP)

    b.cli_group(f"{NS_PREFIX}warm-cli")  # the first command starts the command server
    b.cleanup()
    methods: dict[str, Callable[[str], object]] = {"ctr": b.ctr_group, "docker": docker}
    for key, inproc in CLI_MODES.items():
        methods[key] = partial(b.cli_group, inproc=inproc)
    methods["lib"] = b.lib_group
    out = rounds(n, methods, b.cleanup)
    b.check_clean("1-task groups")
    return out


def existing_netns(b: Bench, n: int) -> Samples:
    """One more task into a namespace that already has one (so its group's shim runs)."""
    netns.create(f"{NS_PREFIX}lib-exist")
    b.lib_task("lib-exist-warm", ns=f"{NS_PREFIX}lib-exist", group="exist")
    b.ip_netns_add(f"{NS_PREFIX}ctr-exist")
    try:
        out = rounds(
            n,
            {
                "ctr": lambda name: run(b.ctr_run(name, ns=f"{NS_PREFIX}ctr-exist")),
                "lib": lambda name: b.lib_task(
                    name.replace(NS_PREFIX, ""), ns=f"{NS_PREFIX}lib-exist", group="exist"
                ),
            },
            lambda: None,
        )
    finally:
        b.cleanup()
    b.check_clean("existing namespace")
    return out


def three_task_group(b: Bench, n: int) -> Samples:
    def docker(name: str) -> None:
        b.docker.pause(f"{name}-pause")
        b.docker.join([f"{name}-{i}" for i in range(3)], f"{name}-pause", SLEEP)

    out = rounds(
        n,
        {
            "ctr": partial(b.ctr_group, tasks=3),
            "docker": docker,
            "lib": partial(b.lib_group, tasks=3),
        },
        b.cleanup,
    )
    b.check_clean("3-task groups")
    return out


def burst(b: Bench, n: int, groups: int) -> Samples:
    """``groups`` groups started at once: groups per second, per round."""

    def lib(name: str) -> None:
        with ThreadPoolExecutor(max_workers=groups) as pool:
            for f in [pool.submit(b.lib_group, f"{name}-{i}") for i in range(groups)]:
                f.result()

    def ctr(name: str, seccomp: bool = False) -> None:
        run_parallel([b.ctr_run(f"{name}-{i}", seccomp=seccomp) for i in range(groups)])

    # ctr applies no seccomp profile unless asked; ctrexec applies its default, whose
    # compile in each task's runc init is ~12 ms of CPU (bench/profile-burst).
    ms = rounds(n, {"ctr": ctr, "ctr-seccomp": partial(ctr, seccomp=True), "lib": lib}, b.cleanup)
    b.check_clean("burst")
    return {k: [groups * 1000.0 / v for v in values] for k, values in ms.items()}


def restart(b: Bench, n: int) -> tuple[Samples, int, int]:
    """A killed task started again into its group; docker with the pause container
    alive (timed) and killed too (each attempt: a time or a failure)."""
    ns = f"{NS_PREFIX}lib-restart"
    netns.create(ns)
    b.lib_task("lib-restart", ns=ns, group="restart")
    b.docker.pause("dk-restart-pause")
    b.docker.join(["dk-restart"], "dk-restart-pause", SLEEP)
    out: Samples = {"lib": [], "docker": []}
    try:
        for _ in range(n):
            b.ex.signal("lib-restart", "SIGKILL")
            b.ex.wait("lib-restart", timeout=30)
            out["lib"].append(timed_ms(partial(b.ex.start, "lib-restart")))
            b.docker.docker("kill", "dk-restart")
            wait_exited(b.docker, "dk-restart")
            took = restart_attempt(b.docker, "dk-restart")
            if isinstance(took, str):
                raise BenchError("docker start failed with its pause container running")
            out["docker"].append(took)
        failures = 0
        for _ in range(n):
            b.docker.docker("kill", "dk-restart", "dk-restart-pause")
            wait_exited(b.docker, "dk-restart")
            wait_exited(b.docker, "dk-restart-pause")
            failures += restart_attempt(b.docker, "dk-restart") == "fails"
            b.docker.docker("start", "dk-restart-pause")
            b.docker.docker("start", "dk-restart")
    finally:
        b.cleanup()
    b.check_clean("restart")
    return out, failures, n


def memory(b: Bench, g: int, how: str) -> MemResult:
    """``g`` sleeping tasks in one group, started one way; their memory."""
    if shim_pids(b.address):
        raise BenchError(f"shims running before the {how} memory scenario")
    extra: list[int] = []
    try:
        if how == "ctr":
            for i in range(g):
                run(b.ctr_run(f"m-ctr-{i}"))
        elif how == "docker":
            b.docker.pause("m-docker-pause")
            extra.append(b.docker.pid_of("m-docker-pause"))
            b.docker.join([f"m-docker-{i}" for i in range(g)], "m-docker-pause", SLEEP)
        else:  # group, single, or group-<log driver>
            ns = f"{NS_PREFIX}lib-mem-{how}"
            netns.create(ns)
            mode = how.removeprefix("group-") if how.startswith("group-") else "json-file"
            driver = "json-file" if mode == "process" else mode
            transport = "process" if mode == "process" else "daemon"
            for i in range(g):
                b.ex.start_task(
                    TaskConfig(
                        name=f"m-{how}-{i}", image=IMAGE, command=SLEEP, netns=ns,
                        group=f"mem-{how}", share_shim=how != "single", log_driver=driver,
                        log_transport=transport if driver == "json-file" else "daemon",
                    )
                )  # fmt: skip
        time.sleep(SETTLE_SECONDS)
        shims = shim_pids(b.address)
        result = MemResult(
            shims=memory_of(shims),
            # The log daemon serves these tasks only (one scenario runs at a time); it
            # outlives a scenario by its idle time, so it counts only while it serves.
            drivers=memory_of(
                logdriver_pids(shims)
                + (log_daemon_pids() if logdaemon_client.registrations() else [])
            ),
            other_shims=len(shim_pids(None)) - len(shims),
            extra=memory_of(extra),
        )
    finally:
        b.cleanup()
    b.check_clean(f"{how} memory")
    return result


# -- start-up of the CLI -------------------------------------------------------------


def heavy_imports(argv: Sequence[str]) -> list[str]:
    """Which of HEAVY a command imports in-process (``python -X importtime``, not a
    timing; with the command server, the client's own imports are its business)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", CTREXEC_CLI, *argv],
        capture_output=True, text=True, check=False, env={**os.environ, NO_SERVER: "1"},
    )  # fmt: skip
    names = set()
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+\d+ \|\s*(\S+)", line)
        if m:
            names.add(m.group(1))
    return [h for h in HEAVY if any(n == h or n.startswith(h + ".") for n in names)]


#: The start-up rows' commands, each read-only: row key -> ctrexec's verb and arguments
#: (the connection flags go after the verb), and docker's.
READS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "help": (("--help",), ("--help",)),
    "version": (("version",), ("version",)),
    "ps": (("ps", "-a"), ("ps", "-a")),
    "inspect": (("inspect", STOPPED), ("inspect", STOPPED)),
    "logs": (("logs", STOPPED), ("logs", STOPPED)),
}


def _make_stopped(b: Bench) -> None:
    """One task that ran ``echo`` and exited, in ctrexec and in docker (same name)."""
    run(b.cli("run", *b.cli_conn(), "--log-dir", str(b.cli_log_dir), "--name", STOPPED,
              IMAGE, "echo", "hello from a stopped task"))  # fmt: skip
    b.docker.names.append(STOPPED)
    b.docker.docker("run", "--name", STOPPED, "--network=none", DOCKER_IMAGE,
                    "echo", "hello from a stopped task")  # fmt: skip


def startup(b: Bench, n: int) -> tuple[Samples, dict[str, list[str]]]:
    """Start-up and the read-only commands: ctrexec both ways, docker, ctr (context)."""
    conn = b.cli_conn()
    cmds: dict[str, tuple[list[str], dict[str, str]]] = {}
    for key, (mine, theirs) in READS.items():
        args = [*mine[:1], *(conn if key != "help" else ()), *mine[1:]]
        for mode, inproc in CLI_MODES.items():
            cmds[f"{mode}-{key}"] = (b.cli(*args), b.cli_env(inproc))
        cmds[f"docker-{key}"] = (b.docker.cli(*theirs), b.docker.env)
    cmds["ctr-help"] = (["ctr", "--help"], b.docker.env)
    cmds["ctr-version"] = (["ctr", "-a", b.address, "version"], b.docker.env)
    _make_stopped(b)
    try:
        for cmd, env in cmds.values():
            run(cmd, env)  # warm the page cache (and start the command server)
        out: Samples = {k: [] for k in cmds}
        for _ in range(n):
            for key, (cmd, env) in cmds.items():
                out[key].append(timed_ms(partial(run, cmd, env)))
        mods = {"--help": heavy_imports(["--help"]), "version": heavy_imports(["version", *conn])}
    finally:
        b.cleanup()
    b.check_clean("start-up and reads")
    return out, mods


def nomad_group(b: Bench, n: int, work: Path) -> Samples:
    """The Nomad driver's StartTask for a 1-task group against ``ctr``'s group."""
    from _nomad import NomadPeer

    peer = NomadPeer(b.address, NAMESPACE, IMAGE, work)
    try:

        def after() -> None:
            peer.cleanup()
            b.cleanup()

        out = rounds(n, {"ctr": b.ctr_group, "nomad": peer.group}, after)
    finally:
        peer.close()
    b.check_clean("nomad StartTask")
    return out
