"""A tiny job queue on ctrexec's library: each job is a group of tasks, run a few at a
time, under a supervisor that applies the tasks' restart policies.

Its jobs: a web server on a published port, which it fetches once it answers; a batch
of two tasks; one that fails its first run and is restarted until it succeeds; one
that fails for good. It prints each task's exit code, restarts and last log lines, the
groups as ``ps`` sees them, and takes every group down again, also after an error.
The supervisor serves the whole containerd namespace, as ``ctrexec supervise`` does.

Run it as root where containerd runs (its socket, or ``$CONTAINERD_ADDRESS``), with an
image that has busybox's ``sh`` and ``httpd``::

    python examples/scheduler.py --image busybox --port 18080

``--bridge`` and ``--subnet`` give it a network of its own (its CNI state then under
``--state-dir``); by default it shares ctrexec's bridge with the CLI. Every name it uses
comes from ``ctrexec`` itself: the public API is all a scheduler needs.
"""

from __future__ import annotations

import argparse
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ctrexec import (
    Client,
    CtrexecError,
    Executor,
    Groups,
    GroupSpec,
    Networks,
    RestartPolicy,
    Supervisor,
    TaskConfig,
    TaskInfo,
    read_logs,
)

#: How long one job may take, its restarts included, before it counts as failed.
JOB_TIMEOUT = 120.0
#: The shell scripts of the jobs' tasks. A run's files stay for the next run of its
#: container (a restart), so FLAKY's second run finds the mark its first left.
WEB = "mkdir -p /www && echo hello from the web job > /www/index.html && httpd -f -p 8080 -h /www"
FLAKY = "[ -e /tried ] && echo second run: ok && exit 0; touch /tried; echo first run: bad; exit 3"


@dataclass(frozen=True)
class Job:
    """A group to run. A service (one with a ``url``) keeps running: it is done once
    it answers there; a batch job is done once each of its tasks finished."""

    spec: GroupSpec
    url: str | None = None


def make_jobs(image: str, prefix: str, port: int) -> list[Job]:
    def sh(name: str, script: str, restart: RestartPolicy | None = None) -> TaskConfig:
        policy = restart or RestartPolicy()
        return TaskConfig(name=name, image=image, command=["sh", "-c", script], restart=policy)

    web = sh("server", WEB, RestartPolicy(policy="always", delay=0.5))
    count = [sh(n, f"for i in 1 2 3; do echo {n} $i; done") for n in ("odd", "even")]
    flaky = sh("main", FLAKY, RestartPolicy(policy="on-failure", max_attempts=3, delay=0.2))
    broken = sh("main", "echo no input >&2; exit 3")
    url = f"http://127.0.0.1:{port}/"
    return [
        Job(GroupSpec.of(f"{prefix}web", [web], ports=[f"{port}:8080"]), url),
        Job(GroupSpec.of(f"{prefix}count", count, network="none")),
        Job(GroupSpec.of(f"{prefix}flaky", [flaky], network="none")),
        Job(GroupSpec.of(f"{prefix}broken", [broken], network="none")),
    ]


def finish(ex: Executor, task_id: str) -> TaskInfo:
    """The task's last run, once it exited and its restart policy starts it no more.

    ``wait`` returns at each exit, and at once while a restart is due; ``done`` is the
    supervisor's own rule, so it turns true only after the last restart's run.
    """
    deadline = time.monotonic() + JOB_TIMEOUT
    while True:
        ex.wait(task_id, timeout=max(deadline - time.monotonic(), 0.1))
        info = ex.inspect(task_id, addresses=False)
        if info.done:
            return info
        if time.monotonic() > deadline:
            raise TimeoutError(f"{task_id} did not finish in {JOB_TIMEOUT:g} s")
        time.sleep(0.2)


def fetch(url: str) -> str:
    """What a service says at ``url``, once its port answers."""
    deadline = time.monotonic() + JOB_TIMEOUT
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 (our own URL)
                return f"{resp.status} {resp.read().decode().strip()}"
        except OSError:  # refused or reset while the server starts
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def run_job(groups: Groups, ex: Executor, job: Job) -> list[str]:
    """Bring the job's group up and see it to its end; the lines of its report."""
    spec = job.spec
    groups.up(spec)
    if job.url is not None:
        return [f"{spec.name}: {job.url} answered {fetch(job.url)}"]
    report = []
    for task in spec.tasks:
        info = finish(ex, spec.task_id(task.name))
        report.append(f"{info.id}: exit_code={info.exit_code} restarts={info.restart_count}")
        last = read_logs(info.log_path, driver=info.log_driver, tail=3)
        report += [f"  | {entry.message.rstrip()}" for entry in last]
    return report


def teardown(groups: Groups, names: set[str]) -> int:
    """Take down those of ``names`` that are up, each even if another fails; how many failed."""
    failed = 0
    for name in sorted(names.intersection(groups.names())):
        try:
            groups.down(name, timeout=2)
        except CtrexecError as exc:
            failed += 1
            print(f"{name}: down failed: {exc}", flush=True)
    print(f"down: {', '.join(sorted(names))}", flush=True)
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", help="containerd's socket (default: $CONTAINERD_ADDRESS)")
    parser.add_argument("--namespace", default="sched", help="containerd namespace")
    parser.add_argument("--image", default="busybox", help="an image with sh and httpd")
    parser.add_argument("--port", type=int, default=18080, help="the web job's host port")
    parser.add_argument("--prefix", default="sched-", help="of the groups' names")
    parser.add_argument("--workers", type=int, default=2, help="jobs run at once")
    parser.add_argument("--state-dir", type=Path, default=Path("/var/lib/ctrexec-scheduler"))
    parser.add_argument("--bridge", help="a bridge of the scheduler's own (needs --subnet)")
    parser.add_argument("--subnet", help="its subnet, e.g. 10.88.7.0/24")
    args = parser.parse_args()
    if (args.bridge is None) != (args.subnet is None):
        parser.error("--bridge and --subnet go together")
    state: Path = args.state_dir
    networks = Networks()
    if args.bridge is not None:
        networks = Networks(
            network=args.bridge, bridge=args.bridge, subnet=args.subnet,
            cache_dir=state / "cni-cache", ipam_dir=state / "ipam",
        )  # fmt: skip
    jobs = make_jobs(args.image, args.prefix, args.port)
    failed = 0
    with Client.connect(args.address, namespace=args.namespace) as client:
        ex = Executor(client, log_dir=state / "logs", state_dir=state)
        groups = Groups(ex, networks)
        stop = threading.Event()
        supervisor = Supervisor(ex, lock_dir=state / "supervise")
        watcher = threading.Thread(target=supervisor.run, args=(stop,), name="supervisor")
        watcher.start()
        try:
            with ThreadPoolExecutor(max_workers=args.workers) as pool:
                running = [(job, pool.submit(run_job, groups, ex, job)) for job in jobs]
                for job, future in running:
                    try:
                        print("\n".join(future.result()), flush=True)
                    except Exception as exc:  # one job's failure; the others go on
                        failed += 1
                        print(f"{job.spec.name}: failed: {exc}", flush=True)
            for job in jobs:
                for info in groups.ps(job.spec.name):
                    ports = [f"{p.host_port}->{p.container_port}" for p in info.ports]
                    print(
                        f"ps {info.id}: {info.status.value} exit_code={info.exit_code} "
                        f"restarts={info.restart_count} ports={','.join(ports) or '-'}"
                    )
        finally:
            stop.set()  # first: a supervisor would restart what goes down
            watcher.join()
            failed += teardown(groups, {job.spec.name for job in jobs})
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
