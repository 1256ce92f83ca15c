"""Issue 36: the embedded containerd is one of ctrexec's helpers; what its death does.

ctrexec starts its embedded containerd when no address is given and none runs, so
the next command run while it is dead brings it back. Shims outlive it: the task
runs on, and once the daemon is back ``ps`` shows it again (the same pid) and a
``ctrexec supervise`` that ran all along reconnects and restarts what exits.

Everything goes through the real CLI with no ``--address``, the embedded daemon's
directories moved into a private one (``CTREXEC_EMBEDDED_DIR``), so the containerd
killed is this test's own; the kill is a real SIGKILL of its pid.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from _chaoslib import IMAGE, Proc, alive, kill_strays, ppid, proc, remove_cgroups, wait_for
from _cli import CLI_PROG

from ctrexec.cli.client import NO_SERVER_ENV
from ctrexec.containerd.client import Client
from ctrexec.containerd.daemon import DaemonPaths
from ctrexec.defaults import ADDRESS_ENV, DEFAULT_ADDRESS, EMBEDDED_DIR_ENV
from ctrexec.tasks.supervised import is_supervised
from ctrexec.testing import PRIVATE_PARENT, import_image

#: This run's own: the fixture's cleanup kills every process in the namespace's task
#: cgroups, which are the host's, not the run's; CI runs each containerd's suite at
#: once, and a fixed name let one run's cleanup kill the other run's task mid-test.
NAMESPACE = f"chaos-embedded-{secrets.token_hex(3)}"


class Embedded:
    """The CLI with no address, on an embedded containerd under ``base``."""

    def __init__(self, base: Path, tmp_path: Path) -> None:
        self.paths = DaemonPaths.under(base)
        self.env = {k: v for k, v in os.environ.items() if k != ADDRESS_ENV}
        self.env.update({EMBEDDED_DIR_ENV: str(base), NO_SERVER_ENV: "1"})
        self.log_dir = tmp_path / "logs"

    def argv(self, *words: str) -> list[str]:
        verb = ["daemon", words[1]] if words[0] == "daemon" else [words[0]]
        rest = words[2:] if words[0] == "daemon" else words[1:]
        flags = [] if words[0] == "daemon" else ["--namespace", NAMESPACE]
        if words[0] == "run":
            flags += ["--log-dir", str(self.log_dir)]
        return [*CLI_PROG, *verb, *flags, *rest]

    def __call__(self, *words: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*words),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def pid(self) -> int:
        return int(self.paths.pidfile.read_text())


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[Embedded]:
    if Path(DEFAULT_ADDRESS).exists():
        pytest.skip(f"{DEFAULT_ADDRESS} exists: a CLI with no address would use it")
    base = Path(tempfile.mkdtemp(prefix="cxd-emb-", dir=PRIVATE_PARENT))
    cli = Embedded(base, tmp_path)
    left: list[str] = []
    try:
        yield cli
    finally:
        cli("daemon", "start")  # one killed by a failed test first, to end its tasks
        cli("daemon", "stop")  # kills its tasks (and so their shims), then the daemon
        left = kill_strays(cli.paths.address, NAMESPACE, "", tmp_path)
        remove_cgroups(NAMESPACE)
        shutil.rmtree(base, ignore_errors=True)
    assert left == [], left


def _what_died(embedded: Embedded, task: Proc, shim: Proc, sup: subprocess.Popen[str]) -> str:
    """For a failure's message: which of the two is gone, and the logs of those who
    could have ended it (containerd's own, the supervisor's)."""
    sup.send_signal(signal.SIGTERM)
    try:
        _, err = sup.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        err = "(the supervisor did not end on SIGTERM)"
    try:
        daemon_log = embedded.paths.log.read_text(errors="replace")[-6000:]
    except OSError as exc:
        daemon_log = f"({exc})"
    return (
        f"task {task.pid} alive={alive(task)}, shim {shim.pid} alive={alive(shim)}\n"
        f"supervisor's stderr:\n{err[-4000:]}\ncontainerd's log (its end):\n{daemon_log}"
    )


def test_a_killed_embedded_containerd_comes_back_and_finds_its_tasks(
    embedded: Embedded, test_image_archive: Path
) -> None:
    started = embedded("daemon", "start")
    assert started.returncode == 0, started.stderr
    import_image(embedded.paths.address, NAMESPACE, test_image_archive)
    name = "emb-srv"
    run = embedded("run", "-d", "--restart", "always", "--name", name, IMAGE, "sleep", "1000")
    assert run.returncode == 0, run.stderr
    sup = subprocess.Popen(
        embedded.argv("supervise"), env=embedded.env, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        with Client.connect(embedded.paths.address, namespace=NAMESPACE) as client:
            # Up (its connection made) before the kill, or its own start would revive it.
            wait_for(lambda: is_supervised(client), "the supervisor's presence lock", timeout=60)
        task = proc(int(embedded("inspect", "-f", "{{.State.Pid}}", name).stdout))
        shim = proc(ppid(task.pid))
        first = embedded.pid()

        assert alive(task) and alive(shim), _what_died(embedded, task, shim, sup)
        os.kill(first, signal.SIGKILL)  # our own containerd, by its pid
        wait_for(lambda: not Path(f"/proc/{first}").exists(), "containerd to die")
        assert alive(task) and alive(shim), _what_died(embedded, task, shim, sup)
        strict = subprocess.run(
            [*embedded.argv("ps"), "--address", embedded.paths.address],
            env=embedded.env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert strict.returncode == 125 and strict.stdout == "", strict
        assert strict.stderr.count("\n") == 1 and "Traceback" not in strict.stderr
        assert strict.stderr.rstrip().endswith("run `ctrexec daemon start`"), strict.stderr
        assert not Path(f"/proc/{embedded.pid()}").exists()  # an explicit address starts none

        listed = embedded("ps", "--format", "{{.Names}} {{.Pid}} {{.Status}}")
        assert listed.returncode == 0, listed.stderr
        assert "starting embedded containerd" in listed.stderr  # the command brought it back
        assert embedded.pid() != first and Path(f"/proc/{embedded.pid()}").exists()
        assert listed.stdout.startswith(f"{name} {task.pid} Up "), listed.stdout
        assert alive(task) and alive(shim)

        # The supervisor, running all along, reconnected: it restarts what exits.
        os.kill(task.pid, signal.SIGKILL)

        def restarted() -> int | None:
            out = embedded("inspect", "-f", "{{.State.Pid}}", name).stdout.strip()
            pid = int(out) if out.isdigit() else 0
            return pid if pid not in (0, task.pid) else None

        again = wait_for(restarted, "the supervisor's restart after the reconnect", timeout=90)
        assert Path(f"/proc/{again}/cmdline").read_bytes().startswith(b"sleep\0")
        assert sup.poll() is None
    finally:
        sup.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            sup.wait(timeout=30)
        if sup.poll() is None:
            sup.kill()
            sup.wait(timeout=30)
        assert sup.stderr is not None
        said = sup.stderr.read()
        sup.stderr.close()
    assert sup.returncode == 0, said
    assert "Traceback" not in said, said
