"""The run issue's acceptance tests: real containerd, runc, netns and busybox."""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import TEST_NAMESPACE, Cli
from _support import until

from ctrexec import errors
from ctrexec._linux import mounts_under
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.net import netns, nsinfo
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ex(
    client: Client, tmp_path: Path, test_image: str, containerd_address: str
) -> Iterator[Executor]:
    executor = Executor(client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
    # Only the session daemon's mounts: other processes on the machine may mount too.
    daemon_dir = Path(containerd_address).parent.parent
    yield executor
    for info in executor.list(all_tasks=True):
        executor.destroy(info.id, force=True)
    assert mounts_under(daemon_dir) == [], "test left mounts behind"
    leftover_cgroups = list(Path("/sys/fs/cgroup").glob(f"*/ctrexec/{TEST_NAMESPACE}")) + list(
        Path("/sys/fs/cgroup").glob(f"ctrexec/{TEST_NAMESPACE}")
    )
    assert leftover_cgroups == []
    leftovers = list((tmp_path / "files").glob("*")) if (tmp_path / "files").exists() else []
    assert leftovers == []


@pytest.fixture
def ns(request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"cxt-{secrets.token_hex(4)}"
    netns.create(name)
    try:
        yield name
    finally:
        netns.remove(name)
    assert not Path(f"/run/netns/{name}").exists()


def _cfg(name: str, image: str, *cmd: str, **kw: object) -> TaskConfig:
    return TaskConfig(name=name, image=image, command=cmd or None, **kw)  # type: ignore[arg-type]


def _log_has(path: str, text: bytes) -> bool:
    log = Path(path)
    return log.exists() and text in log.read_bytes()


def test_two_tasks_share_netns_and_restart(ex: Executor, ns: str, test_image: str) -> None:
    server = ex.start_task(
        _cfg("srv", test_image, "httpd", "-f", "-p", "127.0.0.1:8080", "-h", "/var/www", netns=ns)
    )
    client_task = ex.start_task(_cfg("cli", test_image, "sleep", "1000", netns=ns))
    addrs_before = nsinfo.inspect(server.netns_path or "").addresses

    def fetch() -> bool:
        r = ex.exec("cli", ["wget", "-q", "-O", "-", "http://127.0.0.1:8080/"])
        return r.exit_code == 0 and b"hello from ctrexec" in r.stdout

    until(fetch, "the server to answer", timeout=20)
    # Kill the server with SIGKILL: the namespace must survive with no pause container.
    ex.signal("srv", "SIGKILL")
    assert ex.wait("srv", timeout=30).exit_code == 137
    assert ex.exec("cli", ["wget", "-q", "-O", "-", "http://127.0.0.1:8080/"]).exit_code != 0
    again = ex.start("srv")
    assert again.netns_path == server.netns_path
    until(fetch, "the restarted server to answer", timeout=20)
    # The other task never noticed: same pid, still running; addresses unchanged.
    info = ex.inspect("cli")
    assert info.status is Status.RUNNING
    assert info.pid == client_task.pid
    assert nsinfo.inspect(server.netns_path or "").addresses == addrs_before
    # Each has its own hosts file, naming itself.
    for task in ("srv", "cli"):
        hosts = ex.exec(task, ["cat", "/etc/hosts"]).stdout
        assert b"127.0.0.1\tlocalhost" in hosts and f"127.0.1.1\t{task}\n".encode() in hosts


def test_exec_exit_code_and_output(ex: Executor, test_image: str) -> None:
    ex.start_task(_cfg("ex1", test_image, "sleep", "1000"))
    r = ex.exec("ex1", ["sh", "-c", "echo out; echo err >&2; exit 7"])
    assert (r.exit_code, r.stdout, r.stderr) == (7, b"out\n", b"err\n")
    assert ex.exec("ex1", ["true"]).exit_code == 0
    with pytest.raises(errors.CommandNotFound):
        ex.exec("ex1", ["/no/such/binary"])


def test_stop_honours_signal_and_timeout(ex: Executor, test_image: str) -> None:
    script = 'trap "echo got-term; exit 3" TERM; echo ready; while true; do sleep 0.1; done'
    h = ex.start_task(_cfg("stop1", test_image, "sh", "-c", script))
    until(lambda: _log_has(h.log_path, b"ready"), "ready in the log", timeout=20)
    status = ex.stop("stop1", timeout=30)
    assert status is not None and status.exit_code == 3
    until(lambda: b"got-term" in Path(h.log_path).read_bytes(), "got-term in the log", timeout=20)
    # A task that ignores the stop signal is killed when the timeout passes.
    h2 = ex.start_task(
        _cfg(
            "stop2",
            test_image,
            "sh",
            "-c",
            'trap "" TERM; echo ready; while true; do sleep 0.1; done',
        )
    )
    until(lambda: _log_has(h2.log_path, b"ready"), "ready in the log", timeout=20)
    status = ex.stop("stop2", timeout=0.5)
    assert status is not None and status.exit_code == 137
    # The image's StopSignal is the default: ctrexec-test declares SIGTERM.
    assert ex.inspect("stop2").labels["io.ctrexec.stop.signal"] == "SIGTERM"


def test_a_start_of_a_running_task_is_refused_as_already_running(
    ex: Executor, test_image: str
) -> None:
    """Its own error, so a front end (docker's ``start``: exit 0) needs no second read;
    a paused task's refusal is another."""
    ex.start_task(_cfg("again1", test_image, "sleep", "600"))
    pid = ex.inspect("again1").pid
    with pytest.raises(errors.AlreadyRunning, match=r"^container again1 is already running$"):
        ex.start("again1")
    ex.pause("again1")
    with pytest.raises(errors.FailedPrecondition, match="already paused") as refused:
        ex.start("again1")
    assert not isinstance(refused.value, errors.AlreadyRunning)
    ex.resume("again1")
    assert ex.inspect("again1").pid == pid  # the same run throughout
    ex.destroy("again1", force=True)


def test_stop_signal_option(ex: Executor, test_image: str) -> None:
    script = 'trap "echo got-usr1; exit 5" USR1; echo ready; while true; do sleep 0.1; done'
    h = ex.start_task(_cfg("sig1", test_image, "sh", "-c", script, stop_signal="SIGUSR1"))
    until(lambda: _log_has(h.log_path, b"ready"), "ready in the log", timeout=20)
    status = ex.stop("sig1", timeout=30)
    assert status is not None and status.exit_code == 5


def test_stats_show_memory_and_cpu(ex: Executor, test_image: str) -> None:
    ex.start_task(
        _cfg(
            "st1",
            test_image,
            "sh",
            "-c",
            "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 1000",
            memory="64m",
        )
    )
    s = ex.stats("st1")
    assert s.memory_usage > 0
    assert s.memory_limit == 64 * 1024 * 1024
    until(lambda: ex.stats("st1").cpu_usage_ns > 0, "CPU time in the stats", timeout=20)
    assert s.pids_current >= 1


def test_pause_resume(ex: Executor, test_image: str) -> None:
    ex.start_task(_cfg("pz", test_image, "sleep", "1000"))
    ex.pause("pz")
    assert ex.inspect("pz").status is Status.PAUSED
    ex.resume("pz")
    assert ex.inspect("pz").status is Status.RUNNING


def test_handle_roundtrip_and_recover(ex: Executor, test_image: str, client: Client) -> None:
    h = ex.start_task(_cfg("rec", test_image, "sh", "-c", "exit 4"))
    persisted = h.to_json()
    # A new executor (as after a scheduler restart) re-attaches and sees the exit.
    from ctrexec.tasks.reports import TaskHandle

    other = Executor(client, log_dir=ex.log_dir, files_dir=ex.files_dir)
    until(lambda: other.inspect("rec").status is Status.STOPPED, "the exit", timeout=20)
    info = other.recover(TaskHandle.from_json(persisted))
    assert info.exit is not None and info.exit.exit_code == 4
    assert info.config is not None and info.config.command == ("sh", "-c", "exit 4")


def test_logs_survive_ctrexec_exit(cli: Cli, test_image: str, tmp_path: Path, ex: Executor) -> None:
    """A detached run from a CLI process that exits: the shim's log driver keeps writing."""
    logs = tmp_path / "logs"
    script = "echo first; sleep 1; echo second >&2; sleep 1000"
    out = cli("run", "-d", "--name", "bg", test_image, "sh", "-c", script, check=True)
    assert out.stdout.strip() == "bg"
    log = logs / TEST_NAMESPACE / "bg" / "task.log"
    until(lambda: log.exists() and b"second" in log.read_bytes(), "the second line", timeout=20)
    text = log.read_text()
    assert '"stream":"stdout"' in text.replace(" ", "") and '"stream":"stderr"' in text.replace(
        " ", ""
    )
    got = cli("logs", "bg", check=True)
    assert got.stdout == "first\n"
    assert got.stderr == "second\n"


def test_foreground_run_streams_and_exits_with_code(cli: Cli, test_image: str) -> None:
    script = "echo hello; echo oops >&2; exit 3"
    out = cli("run", "--rm", "--name", "fg", test_image, "sh", "-c", script)
    assert out.returncode == 3, out.stderr
    assert out.stdout == "hello\n"
    assert out.stderr == "oops\n"


def test_command_not_found_is_127(cli: Cli, test_image: str) -> None:
    out = cli("run", "--rm", "--name", "nf", test_image, "/no/such/cmd")
    assert out.returncode == 127, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_user_from_image_passwd(ex: Executor, test_image: str) -> None:
    ex.start_task(_cfg("usr", test_image, "sleep", "1000", user="app"))
    r = ex.exec("usr", ["id"])
    assert b"uid=1000(app)" in r.stdout
    assert b"50(staff)" in r.stdout


def test_image_from_default_namespace_runs(
    ex: Executor, containerd_address: str, test_image_archive: Path
) -> None:
    """An image imported by `ctr images import` into `default` runs in ours."""
    name = "docker.io/library/ctrexec-default-ns:v1"
    archive = test_image_archive.parent / "other.tar"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "build-test-image"),
            "--out",
            str(archive),
            "--name",
            name,
        ],
        check=True,
    )
    subprocess.run(
        ["ctr", "-a", containerd_address, "-n", "default", "images", "import", str(archive)],
        check=True,
        capture_output=True,
    )
    try:
        h = ex.start_task(_cfg("dflt", name, "echo", "from-default"))
        assert ex.wait("dflt", timeout=60).exit_code == 0
        until(lambda: b"from-default" in Path(h.log_path).read_bytes(), "the output", timeout=20)
    finally:
        subprocess.run(
            ["ctr", "-a", containerd_address, "-n", "default", "images", "rm", name],
            check=False,
            capture_output=True,
        )
