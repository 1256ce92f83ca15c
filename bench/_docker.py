"""The docker + pause peer: Debian's dockerd on private paths, on the benchmark's containerd.

dockerd is a benchmark dependency only: when it is missing, :func:`ensure_installed`
runs ``scripts/setup --bench``, which installs docker.io without letting its
maintainer scripts start a system daemon. This module never touches
/var/run/docker.sock or /var/lib/docker; everything lives under one directory that
:meth:`Dockerd.stop` removes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from _common import BenchError, mounts_under, run, run_parallel, wait_until

DOCKERD = "/usr/sbin/dockerd"
DOCKER = "/usr/bin/docker"  # Debian's CLI, same release as the daemon
IMAGE = "ctrexec-bench-busybox:latest"
CONTAINERD_NS = "ctrexec-bench-docker"
CGROUP_PARENT = "ctrexec-bench-docker"
PAUSE_CMD = ("sleep", "1000000")
JOIN_ERROR = "cannot join network of a non running container"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
SYSTEM_PATHS = (Path("/var/lib/docker"), Path("/var/run/docker.sock"))
# dockerd 20.10 writes its identity key here whatever its other paths are (no flag
# moves it); removed afterwards when the benchmark's daemon was the one that made it.
TRUST_KEY = Path("/etc/docker/key.json")


def ensure_installed(root: Path) -> None:
    if Path(DOCKERD).exists() and Path(DOCKER).exists():
        return
    run(["bash", str(root / "scripts" / "setup"), "--bench"])
    if not Path(DOCKERD).exists():
        raise BenchError("scripts/setup --bench did not install dockerd")


def version() -> str:
    out = run([DOCKERD, "--version"]).stdout.split()
    return out[2].rstrip(",") if len(out) > 2 else "?"


def other_dockerds(mine: int | None) -> list[int]:
    """dockerd processes that this benchmark did not start."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == mine:
            continue
        with contextlib.suppress(OSError):
            if Path(f"/proc/{entry.name}/comm").read_text().strip() == "dockerd":
                found.append(int(entry.name))
    return found


def layer_of(archive: Path, out: Path) -> Path:
    """Copy the (single) layer of the OCI image archive to ``out`` for docker import."""
    with tarfile.open(archive) as tar:

        def blob(digest: str) -> bytes:
            member = tar.extractfile(f"blobs/sha256/{digest.split(':', 1)[1]}")
            if member is None:
                raise BenchError(f"{archive}: no blob {digest}")
            return member.read()

        index_file = tar.extractfile("index.json")
        if index_file is None:
            raise BenchError(f"{archive}: no index.json")
        index = json.loads(index_file.read())
        manifest = json.loads(blob(index["manifests"][0]["digest"]))
        if len(manifest["layers"]) != 1:
            raise BenchError(f"{archive}: expected one layer, found {len(manifest['layers'])}")
        out.write_bytes(blob(manifest["layers"][0]["digest"]))
    return out


class Dockerd:
    """One dockerd on its own data-root, exec-root, pidfile and socket, started and
    stopped (by pid) by the benchmark."""

    def __init__(self, base: Path, containerd: str) -> None:
        self.base = base
        self.containerd = containerd
        self.sock = base / "docker.sock"
        self.proc: subprocess.Popen[bytes] | None = None
        self.env = {**os.environ, "DOCKER_CONFIG": str(base / "cli"), "DOCKER_HOST": ""}
        self.names: list[str] = []  # every container made, for the final sweep
        self.system_before = {p: p.exists() for p in SYSTEM_PATHS}
        self.trust_key_before = TRUST_KEY.exists()

    def argv(self) -> list[str]:
        b = self.base
        return [
            DOCKERD,
            f"--data-root={b / 'data'}",
            f"--exec-root={b / 'exec'}",
            f"--pidfile={b / 'dockerd.pid'}",
            f"--host=unix://{self.sock}",
            f"--config-file={b / 'daemon.json'}",
            f"--containerd={self.containerd}",
            f"--containerd-namespace={CONTAINERD_NS}",
            f"--containerd-plugins-namespace={CONTAINERD_NS}-plugins",
            f"--cgroup-parent=/{CGROUP_PARENT}",
            "--exec-opt=native.cgroupdriver=cgroupfs",
            "--bridge=none",
            "--iptables=false",
            "--ip6tables=false",
            "--ip-forward=false",
            "--ip-masq=false",
            "--userland-proxy=false",
            "--storage-driver=overlay2",
            "--log-level=warn",
        ]

    def start(self) -> None:
        self.base.mkdir(parents=True)
        (self.base / "daemon.json").write_text("{}\n")
        log = (self.base / "dockerd.log").open("wb")
        with log:
            self.proc = subprocess.Popen(
                self.argv(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            wait_until(self._ready, START_TIMEOUT, "dockerd to answer")
        except BenchError as exc:
            raise BenchError(f"{exc}; its log: {self.log_tail()}") from exc

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise BenchError(f"dockerd exited {self.proc.returncode}: {self.log_tail()}")
        if not self.sock.exists():
            return False
        probe = subprocess.run(self.cli("version"), capture_output=True, check=False)
        return probe.returncode == 0

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return (self.base / "dockerd.log").read_text(errors="replace")[-600:]
        return ""

    def cli(self, *args: str) -> list[str]:
        return [DOCKER, "-H", f"unix://{self.sock}", *args]

    def docker(self, *args: str) -> str:
        return run(self.cli(*args), env=self.env).stdout.strip()

    def import_image(self, archive: Path) -> None:
        layer = layer_of(archive, self.base / "layer.tar.gz")
        path_env = "ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin"
        self.docker("import", "--change", path_env, str(layer), IMAGE)
        layer.unlink()

    # -- the pause design ---------------------------------------------------------

    def run_args(self, name: str, network: str, command: Sequence[str]) -> list[str]:
        self.names.append(name)
        return self.cli("run", "-d", "--name", name, f"--network={network}", IMAGE, *command)

    def pause(self, name: str) -> None:
        """A container whose only job is to own the group's network namespace."""
        run(self.run_args(name, "none", PAUSE_CMD), env=self.env)

    def join(self, names: Sequence[str], pause: str, command: Sequence[str]) -> None:
        """Start ``names`` at once, each in the pause container's namespace."""
        cmds = [self.run_args(n, f"container:{pause}", command) for n in names]
        if len(cmds) == 1:
            run(cmds[0], env=self.env)
        else:
            run_parallel(cmds, env=self.env)

    def pid_of(self, name: str) -> int:
        return int(self.docker("inspect", "-f", "{{.State.Pid}}", name))

    def remove(self, names: Sequence[str]) -> None:
        if names:
            self.docker("rm", "-f", *names)

    def containers(self) -> list[str]:
        return self.docker("ps", "-aq").split()

    # -- teardown -------------------------------------------------------------------

    def stop(self) -> list[str]:
        """Remove what is left, stop dockerd by its pid, remove its directories;
        return what could not be removed."""
        left: list[str] = []
        if self.proc is None:
            return left
        with contextlib.suppress(BenchError):
            self.remove(self.containers())
        with contextlib.suppress(BenchError):
            if self.containers():
                left.append(f"docker containers left: {self.containers()}")
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                left.append("dockerd did not stop on SIGTERM; killed")
        for mount in sorted(mounts_under(self.base), key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
        if mounts_under(self.base):
            left.append(f"mounts under {self.base}: {mounts_under(self.base)}")
        else:
            shutil.rmtree(self.base, ignore_errors=True)
        if self.base.exists():
            left.append(f"{self.base} left behind")
        left += self.audit_system()
        return left

    def audit_system(self) -> list[str]:
        """The system daemon's paths must be as they were; no dockerd of ours may run."""
        if not self.trust_key_before:
            TRUST_KEY.unlink(missing_ok=True)
        left = [
            f"{p} appeared during the benchmark"
            for p, existed in self.system_before.items()
            if p.exists() and not existed
        ]
        if self.proc is not None and self.proc.poll() is None:
            left.append(f"dockerd {self.proc.pid} still running")
        return left


@contextlib.contextmanager
def dockerd(base: Path, containerd: str, archive: Path) -> Iterator[Dockerd]:
    daemon = Dockerd(base, containerd)
    try:
        daemon.start()
        daemon.import_image(archive)
        yield daemon
    except BaseException:
        for p in daemon.stop():  # the step's own error is the one raised
            print(f"bench/run: {p}", file=sys.stderr)
        raise
    problems = daemon.stop()
    if problems:
        raise BenchError("; ".join(problems))


def wait_exited(d: Dockerd, name: str) -> None:
    wait_until(
        lambda: d.docker("inspect", "-f", "{{.State.Running}}", name) == "false",
        30.0,
        f"{name} to exit",
    )


def restart_attempt(d: Dockerd, task: str) -> float | str:
    """``docker start`` of an exited joined task: its time in ms, or "fails"."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        d.cli("start", task), capture_output=True, text=True, env=d.env, check=False
    )
    if proc.returncode == 0:
        return (time.perf_counter() - t0) * 1000.0
    if JOIN_ERROR in proc.stderr:
        return "fails"
    raise BenchError(f"docker start {task}: {proc.stderr.strip()}")
