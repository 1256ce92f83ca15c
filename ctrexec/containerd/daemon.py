"""The embedded containerd: a private daemon ctrexec starts when none is running.

It has its own root, state directory and socket under directories ctrexec owns, so it
never touches a system containerd. Starting waits until the daemon answers; stopping
kills and deletes its tasks first (so no shim outlives it), terminates the daemon by
pid, and detaches any mount left under its directories.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ctrexec import errors
from ctrexec._linux import mounts_under, unmount_all
from ctrexec.containerd import daemonpaths, tasks
from ctrexec.containerd.client import Client
from ctrexec.defaults import CONTAINERD_BIN_ENV
from ctrexec.placement import helper_argv

if TYPE_CHECKING:
    from ctrexec.paths import StrPath

#: Defined apart (the client's address rule needs them, and this module imports the
#: client), and named here too, where callers have always found them.
DaemonPaths = daemonpaths.DaemonPaths
default_paths = daemonpaths.default_paths

#: Plugins the embedded daemon never needs. Leaving CRI out saves memory and time;
#: the exotic snapshotters would only log errors on a plain ext4/xfs host. 2.x split
#: CRI into plugins of its own and added NRI, sandboxes, transfer and streaming, none
#: of which ctrexec calls; an id a version doesn't have is ignored by it.
DISABLED_PLUGINS = (
    "io.containerd.grpc.v1.cri",
    "io.containerd.cri.v1.images",
    "io.containerd.cri.v1.runtime",
    "io.containerd.nri.v1.nri",
    "io.containerd.podsandbox.controller.v1.podsandbox",
    "io.containerd.sandbox.controller.v1.shim",
    "io.containerd.grpc.v1.sandbox-controllers",
    "io.containerd.grpc.v1.sandboxes",
    "io.containerd.transfer.v1.local",
    "io.containerd.grpc.v1.transfer",
    "io.containerd.streaming.v1.manager",
    "io.containerd.grpc.v1.streaming",
    "io.containerd.monitor.container.v1.restart",
    "io.containerd.snapshotter.v1.aufs",
    "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.zfs",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.snapshotter.v1.blockfile",
    "io.containerd.snapshotter.v1.erofs",
    "io.containerd.differ.v1.erofs",
    "io.containerd.tracing.processor.v1.otlp",
    "io.containerd.internal.v1.tracing",
)
#: The config version containerd 1.x reads without migrating it.
CONFIG_VERSION = 2


def render_config(paths: DaemonPaths, version: int = CONFIG_VERSION) -> str:
    """containerd's TOML config for a private daemon, in the config version it speaks.

    The keys used here are the same in versions 2 and 3; only the number differs, and
    a daemon given an older number migrates the file at every start, with a warning.
    """
    disabled = ", ".join(f'"{p}"' for p in DISABLED_PLUGINS)
    return (
        f"version = {version}\n"
        f'root = "{paths.root}"\n'
        f'state = "{paths.state}"\n'
        f"disabled_plugins = [{disabled}]\n"
        "oom_score = -999\n\n"
        "[grpc]\n"
        f'  address = "{paths.address}"\n\n'
        "[ttrpc]\n"
        f'  address = "{paths.address}.ttrpc"\n\n'
        "[debug]\n"
        '  level = "info"\n\n'
        "[metrics]\n"
        '  address = ""\n'
    )


class EmbeddedContainerd:
    """Start, find and stop one private containerd, identified by its directories."""

    def __init__(self, paths: DaemonPaths | None = None, *, binary: StrPath | None = None) -> None:
        self.paths = paths or default_paths()
        given = None if binary is None else os.fspath(binary)
        self.binary = given or os.environ.get(CONTAINERD_BIN_ENV) or "containerd"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return self.paths.address

    def pid(self) -> int | None:
        """The daemon's pid when it is alive and really is our containerd."""
        if self._proc is not None and self._proc.poll() is None:
            return self._proc.pid
        try:
            pid = int(self.paths.pidfile.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        if str(self.paths.config).encode() not in cmdline:
            return None  # the pid was recycled by something else
        return pid

    def is_running(self) -> bool:
        return self.pid() is not None

    def start(self, *, timeout: float = 30.0) -> None:
        """Start the daemon unless it already runs, and wait until it answers."""
        if self.is_running():
            self._wait_ready(timeout)
            return
        exe = shutil.which(self.binary)
        if exe is None:
            raise errors.DaemonError(f"{self.binary} not found on PATH; install containerd")
        env = _daemon_env(exe)
        # The root as containerd makes its own (0711); the state directory, which holds
        # the socket (and the shims' FIFOs), root's alone, also one made before
        # (docs/security.md).
        self.paths.root.mkdir(parents=True, exist_ok=True, mode=0o711)
        self.paths.state.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.paths.state.chmod(0o700)
        with contextlib.suppress(FileNotFoundError):
            Path(self.address).unlink()
        self.paths.config.write_text(render_config(self.paths, config_version(exe, env)))
        log = self.paths.log.open("ab")
        try:
            self._proc = subprocess.Popen(
                # A scope of its own on a systemd host: the caller's unit may end first.
                helper_argv("containerd", [exe, "--config", str(self.paths.config)]),
                env=env,
                cwd=self.paths.state,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            log.close()
        self.paths.pidfile.write_text(f"{self._proc.pid}\n")
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise errors.DaemonError(
                    f"containerd exited with {self._proc.returncode} while starting: "
                    f"{self._log_tail()}"
                )
            if Path(self.address).exists():
                try:
                    with Client.connect(self.address, timeout=2.0) as client:
                        client.version()
                    return
                except errors.CtrexecError as exc:
                    last = exc
            time.sleep(0.05)
        raise errors.DaemonError(
            f"containerd at {self.address} did not answer within {timeout:.0f}s: {last}"
        )

    def _log_tail(self) -> str:
        try:
            lines = self.paths.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return lines[-1] if lines else "(empty log)"

    def client(self, namespace: str | None = None) -> Client:
        return Client.connect(self.address, namespace=namespace)

    def kill_all_tasks(self, *, timeout: float = 10.0) -> None:
        """Kill and delete every task in every namespace, so their shims exit."""
        with Client.connect(self.address) as root:
            for ns in root.namespaces():
                client = root.with_namespace(ns)
                for state in tasks.list_tasks(client):
                    # One stuck task must not keep the others' shims alive.
                    with contextlib.suppress(
                        errors.NotFound, errors.FailedPrecondition, errors.DeadlineExceeded
                    ):
                        tasks.force_delete(client, state.container_id, timeout=timeout)

    def stop(self, *, timeout: float = 10.0, kill_tasks: bool = True) -> None:
        """Stop the daemon (and, by default, its tasks) and detach leftover mounts."""
        pid = self.pid()
        if pid is not None and kill_tasks:
            with contextlib.suppress(errors.CtrexecError):
                self.kill_all_tasks(timeout=timeout)
        if pid is not None:
            _terminate(pid, self._proc, timeout)
        self._proc = None
        with contextlib.suppress(FileNotFoundError):
            self.paths.pidfile.unlink()
        unmount_all(mounts_under(self.paths.state) + mounts_under(self.paths.root))


def _daemon_env(exe: str) -> dict[str, str]:
    """The environment with the binary's own directory first on PATH.

    containerd finds its shim (containerd-shim-runc-v2) on PATH, so a containerd from
    another directory runs the shim it came with, not the host's. runc stays the one
    PATH names.
    """
    env = dict(os.environ)
    where = str(Path(exe).resolve().parent)
    env["PATH"] = os.pathsep.join([where, env.get("PATH", os.defpath)])
    return env


def config_version(exe: str, env: dict[str, str]) -> int:
    """The config version the binary writes itself (``containerd config default``).

    Asked of the binary, not read off its version string: 2.x speaks 3, 1.x speaks 2.
    """
    try:
        out = subprocess.run(
            [exe, "config", "default"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise errors.DaemonError(f"{exe} config default failed: {exc}") from exc
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "version" and value.strip().isdigit():
            return int(value.strip())
    return CONFIG_VERSION


def _terminate(pid: int, proc: subprocess.Popen[bytes] | None, timeout: float) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None:
            if proc.poll() is not None:
                return
        elif not Path(f"/proc/{pid}").exists():
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if proc is not None:
        proc.wait(timeout=timeout)
