"""The command server (ctrexec.cli.server) as the ``ctrexec`` console script uses it.

Every command here goes through the client (``python -m ctrexec.cli.client``) with a
private server directory; the rest of the session runs in-process (tests/conftest.py
sets CTREXEC_NO_SERVER=1). Whether a command ran in a child of the server is read
from the server's /proc children while the command blocks, and whether the server
refuses a peer from the wire reply itself.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from queue import Queue

import pytest
from _cli import TEST_NAMESPACE, Cli, cli_argv
from _pty import PtyCli

from ctrexec.cli import client as wire
from ctrexec.cli.client import NO_SERVER_ENV, SERVER_DIR_ENV
from ctrexec.testing import wait_for

CLIENT = (sys.executable, "-m", "ctrexec.cli.client")
PROMPT = b"# "
DETACH = b"\x10\x11"  # ctrl-p ctrl-q


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


class Server:
    """The private server directory, and every server pid seen in it (stopped at the end)."""

    def __init__(self, directory: Path, cli: Cli, *, lib: Path | None = None) -> None:
        """``lib``: a directory holding a copy of the package, which client and server
        import instead of this checkout's (the client runs there: ``-m`` puts it first)."""
        self.directory = directory
        self.cli = cli
        self.cwd = lib
        package = str(lib / "ctrexec") if lib else None
        paths = wire.socket_paths(str(directory), package)
        self.sock, self.lock, self.pidfile = (Path(p) for p in paths)
        self.env = {k: v for k, v in os.environ.items() if k != NO_SERVER_ENV}
        self.env[SERVER_DIR_ENV] = str(directory)
        if lib:  # the server runs with -P: only PYTHONPATH leads it to the copy
            self.env["PYTHONPATH"] = os.pathsep.join(
                filter(None, [str(lib), self.env.get("PYTHONPATH")])
            )
        self.seen: set[int] = set()

    def argv(self, command: str, *args: str, namespace: str | None = TEST_NAMESPACE) -> list[str]:
        return cli_argv(
            command,
            self.cli.address,
            *args,
            namespace=namespace,
            log_dir=self.cli.log_dir,
            prog=CLIENT,
        )

    def __call__(
        self,
        command: str,
        *args: str,
        namespace: str | None = TEST_NAMESPACE,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        umask: int = -1,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(command, *args, namespace=namespace),
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
            env={**self.env, **(env or {})},
            cwd=cwd or self.cwd,
            umask=umask,
        )

    def pid(self) -> int:
        """The listening server's pid (waits, bounded, for one to be up)."""
        wait_for(self._listening, timeout=60, what="the command server to listen")
        pid = int(self.pidfile.read_text())
        self.seen.add(pid)
        return pid

    def _listening(self) -> bool:
        if not (self.sock.exists() and self.pidfile.exists()):
            return False
        with socket.socket(socket.AF_UNIX) as probe:
            return probe.connect_ex(str(self.sock)) == 0

    def children(self) -> list[int]:
        pid = self.pid()
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]

    def note(self) -> None:
        """Record the pid file's server, if any, without waiting for one."""
        if self.pidfile.exists():
            self.seen.add(int(self.pidfile.read_text()))

    def stop(self) -> None:
        self.note()
        for pid in self.seen:
            if _alive(pid):
                os.kill(pid, signal.SIGTERM)
        for pid in self.seen:
            wait_for(lambda p=pid: not _alive(p), timeout=30, what=f"server {pid} to end")


@pytest.fixture
def make_server(cli: Cli) -> Iterator[Callable[..., Server]]:
    """Servers with a directory of their own, every one seen stopped after.

    The directory is made with mkdtemp, not under pytest's (0700) tree, so that one
    test can open it to another uid. ``lib=`` runs client and server from a copy.
    """
    made: list[Server] = []

    def make(lib: Path | None = None) -> Server:
        made.append(Server(Path(tempfile.mkdtemp(prefix="cxsrv-")), cli, lib=lib))
        return made[-1]

    try:
        yield make
    finally:
        for srv in made:
            srv.stop()
            shutil.rmtree(srv.directory)


@pytest.fixture
def server(make_server: Callable[..., Server]) -> Server:
    """A server started the way a first command starts it."""
    srv = make_server()
    first = srv("version")  # no server yet: runs in-process and spawns one
    assert first.returncode == 0, first.stderr
    srv.pid()
    return srv


@pytest.fixture
def names(cli: Cli) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    if made:
        cli("rm", "-f", *made)


def test_server_has_one_thread_and_runs_commands_as_children(
    server: Server, test_image: str
) -> None:
    pid = server.pid()
    assert sorted(os.listdir(f"/proc/{pid}/task")) == [str(pid)]
    with subprocess.Popen(
        server.argv("run", "--rm", "-i", test_image, "cat"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=server.env,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        wait_for(lambda: server.children() != [], timeout=60, what="the command's child")
        proc.stdin.write(b"through the server\n")
        proc.stdin.close()  # EOF reaches cat: it ends, and so does run
        assert proc.stdout.read() == b"through the server\n"
        assert proc.wait(timeout=60) == 0
    assert sorted(os.listdir(f"/proc/{pid}/task")) == [str(pid)]


def test_exit_codes_and_streams(server: Server, test_image: str) -> None:
    ok = server("run", "--rm", test_image, "sh", "-c", "echo out; echo err >&2; exit 0")
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "out\n", "err\n")
    assert server("run", "--rm", test_image, "sh", "-c", "exit 1").returncode == 1
    missing = server("run", "--rm", test_image, "no-such-binary")
    assert missing.returncode == 127, missing.stderr
    usage = server("run", "--no-such-flag")
    assert usage.returncode == 125 and usage.stderr.startswith("ctrexec: ")
    unknown = server("no-such-verb")
    assert unknown.returncode != 0 and "is not a ctrexec command" in unknown.stderr


def test_environment_cwd_and_umask_pass(server: Server, test_image: str, tmp_path: Path) -> None:
    echoed = server(
        "run",
        "--rm",
        "-e",
        "FROM_CLIENT",
        test_image,
        "sh",
        "-c",
        "echo $FROM_CLIENT",
        env={"FROM_CLIENT": "client value"},
    )
    assert echoed.stdout == "client value\n", echoed.stderr
    server("run", "-d", "--name", "cs-envns", test_image, "sleep", "300")
    try:
        listed = server("ps", "-a", namespace=None, env={"CTREXEC_NAMESPACE": TEST_NAMESPACE})
        assert "cs-envns" in listed.stdout, listed.stderr
    finally:
        server("rm", "-f", "cs-envns")
    saved = server("export", test_image, "relative.tar", cwd=tmp_path, umask=0o027)
    assert saved.returncode == 0, saved.stderr
    assert (tmp_path / "relative.tar").stat().st_mode & 0o777 == 0o640


def test_representative_verbs(server: Server, test_image: str, names: list[str]) -> None:
    names.append("cs-verbs")
    run = server(
        "run", "-d", "--name", "cs-verbs", test_image, "sh", "-c", "echo logged; sleep 300"
    )
    assert run.returncode == 0, run.stderr
    assert "cs-verbs" in server("ps").stdout
    wait_for(lambda: server("logs", "cs-verbs").stdout == "logged\n", timeout=60, what="the log")
    assert '"running"' in server("inspect", "cs-verbs").stdout
    assert server("exec", "cs-verbs", "sh", "-c", "exit 7").returncode == 7
    assert server("stop", "-t", "1", "cs-verbs").returncode == 0
    assert server("rm", "cs-verbs").returncode == 0
    assert "cs-verbs" not in server("ps", "-a").stdout


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_signals_reach_an_attached_run(
    server: Server, test_image: str, names: list[str], sig: int
) -> None:
    name = f"cs-sig{int(sig)}"
    names.append(name)
    # PID 1 ignores signals it has no handler for: the shell traps them
    script = "trap 'exit 42' INT TERM; echo ready; sleep 300 & wait"
    proc = subprocess.Popen(
        server.argv("run", "--name", name, test_image, "sh", "-c", script),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=server.env,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == 42  # the trap ran: the signal reached the command
    finally:
        proc.kill()
        proc.communicate(timeout=60)


def test_it_on_a_pty_and_detach(server: Server, test_image: str, names: list[str]) -> None:
    names.append("cs-tty")
    p = PtyCli(server.argv("run", "-it", "--name", "cs-tty", test_image, "sh"), rows=24, cols=80)
    try:
        p.expect(PROMPT)
        p.write(b"echo $((6*7)); stty size\r")
        p.expect(b"42")
        p.expect(b"24 80")
        p.resize(30, 90)  # SIGWINCH to the client, forwarded to the command
        p.write(b"stty size\r")
        p.expect(b"30 90")
        p.write(DETACH)
        assert p.wait() == 0
        assert p.attrs() == p.before
    finally:
        p.close()
    assert '"running"' in server("inspect", "cs-tty").stdout


def test_each_command_runs_once(server: Server) -> None:
    """A command that must not run twice (a second ``netns create`` of a name fails),
    in quick succession: each run by its child once, none also by the client."""

    def netns(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CLIENT, "netns", *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
            env=server.env,
        )

    names = [f"cs-once-{i}" for i in range(20)]
    try:
        for name in names:
            made = netns("create", name)
            assert made.returncode == 0, made.stderr
    finally:  # rm asks containerd whether a task uses a namespace: the session's one
        netns("rm", "--address", server.cli.address, "-n", TEST_NAMESPACE, *names)


def test_killed_server_and_stale_socket(server: Server) -> None:
    old = server.pid()
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: not _alive(old), timeout=30, what="the killed server to end")
    assert server.sock.exists()  # a stale socket: no one listens on it
    again = server("version")
    assert again.returncode == 0 and again.stderr == "", again.stderr
    assert server.pid() != old  # the command started a new one, which bound the path
    assert server("version").returncode == 0


def _ask(server: Server, prefix: list[str], user: int | None = None) -> bytes:
    """Send a raw request for ``--help``, as ``user`` behind ``prefix``; the replies."""
    message = wire.encode_request([b"ctrexec", b"--help"], [b"PATH=/usr/bin"], 0o022)
    code = textwrap.dedent(
        """
        import os, socket, struct, sys
        s = socket.socket(socket.AF_UNIX)
        s.connect(sys.argv[1])
        cwd = os.open(".", os.O_PATH)
        null = os.open("/dev/null", os.O_RDWR)  # the command's output is not the reply
        s.sendmsg([bytes.fromhex(sys.argv[2])], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                  struct.pack("4i", null, null, null, cwd))])
        out = b""
        while chunk := s.recv(64):
            out += chunk
        sys.stdout.buffer.write(out)
        """
    )
    # the system's python: uid 65534 may not reach the venv's interpreter
    done = subprocess.run(
        [*prefix, "/usr/bin/python3", "-I", "-c", code, str(server.sock), message.hex()],
        check=False,
        capture_output=True,
        timeout=60,
        user=user,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _replies(data: bytes) -> list[tuple[bytes, int]]:
    size = wire.REPLY.size
    return [wire.REPLY.unpack_from(data, i) for i in range(0, len(data), size)]


def test_other_uid_and_namespace_are_refused(server: Server) -> None:
    accepted = _replies(_ask(server, []))  # ACCEPTED names the child that ran it
    assert [kind for kind, _ in accepted] == [wire.ACCEPTED, wire.EXITED]
    assert accepted[0][1] > 0 and accepted[1][1] == 0
    server.directory.chmod(0o755)  # let uid 65534 reach the socket
    server.sock.chmod(0o777)
    assert _replies(_ask(server, [], user=65534)) == [(wire.RUN_HERE, wire.REFUSED)]
    other_net = _ask(server, ["unshare", "--net"])
    assert _replies(other_net) == [(wire.RUN_HERE, wire.REFUSED)]
    # and the client, refused in another namespace, runs the command itself
    fell_back = subprocess.run(
        ["unshare", "--net", *CLIENT, "--help"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=server.env,
    )
    assert fell_back.returncode == 0 and fell_back.stdout.startswith("usage: ctrexec")


def test_a_changed_module_makes_the_server_go_away(
    make_server: Callable[..., Server], tmp_path: Path
) -> None:
    """On a private copy of the package, client and server alike: the matrix runs of
    scripts/test share this checkout, and a module changed in it made their servers
    go stale too, so a test of theirs that asked for a listening server waited in vain.
    A server started meanwhile may go stale in turn; the next command replaces it, so
    the test asks, command by command, for a listening server that is not the old one."""
    lib = (tmp_path / "lib").resolve()  # as the client's getcwd() names it
    package = Path(wire.__file__).parents[1]
    shutil.copytree(package, lib / "ctrexec", ignore=shutil.ignore_patterns("__pycache__"))
    server = make_server(lib=lib)
    assert server("version").returncode == 0  # no server yet: it starts one
    _changed_module_replaces_the_server(server, lib / "ctrexec" / "cli" / "client.py")


def _changed_module_replaces_the_server(server: Server, module: Path) -> None:
    old = server.pid()  # it imported the copy: only a change there makes it go away
    stamp = module.stat()
    os.utime(module, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 1_000_000_000))
    try:
        assert server("version").returncode == 0  # stale: it runs here instead
    finally:
        os.utime(module, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    wait_for(lambda: not _alive(old), timeout=30, what="the stale server to leave")

    def fresh() -> bool:
        assert server("version").returncode == 0  # starts a server when none listens
        try:
            pid = int(server.pidfile.read_text())
        except (FileNotFoundError, ValueError):  # none yet, or one leaving or starting
            return False
        server.seen.add(pid)  # stopped at the end, whichever it is
        return pid != old and server._listening()

    wait_for(fresh, timeout=60, what="a fresh command server")


def _lines(stream: object) -> Queue[bytes]:
    """The lines of ``stream`` as they come, read by a thread (a bounded get waits)."""
    lines: Queue[bytes] = Queue()

    def read() -> None:
        for line in stream:  # type: ignore[attr-defined]
            lines.put(line)
        lines.put(b"")

    threading.Thread(target=read, daemon=True).start()
    return lines


def _cat_through(server: Server, name: str, test_image: str, prefix: list[str]) -> str:
    """``run -i cat`` by a client behind ``prefix``: it echoes a line, and meanwhile the
    server has no child (the client ran it itself). The client's /proc status."""
    with subprocess.Popen(
        [*prefix, *server.argv("run", "--rm", "-i", "--name", name, test_image, "cat")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=server.env,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"in-process\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == b"in-process\n"  # the command runs, now
        assert server.children() == []  # and not in the server's child: in the client
        status = Path(f"/proc/{proc.pid}/status").read_text()
        proc.stdin.close()
        assert proc.stdout.read() == b""
        assert proc.wait(timeout=60) == 0
    return status


@pytest.mark.parametrize(
    ("prefix", "confined"),
    [
        (["setpriv", "--no-new-privs"], lambda s: s["NoNewPrivs"] == "1"),
        (
            ["setpriv", "--bounding-set", "-sys_module"],
            lambda s: not int(s["CapBnd"], 16) & 1 << 16,  # CAP_SYS_MODULE
        ),
    ],
    ids=["no_new_privs", "bounding_set"],
)
def test_a_confined_caller_runs_the_command_itself(
    server: Server,
    test_image: str,
    names: list[str],
    prefix: list[str],
    confined: Callable[[dict[str, str]], bool],
) -> None:
    """A child of the server would run the command without the caller's confinement:
    the command runs in the confined process that was started (setpriv execs it)."""
    names.append("cs-confined")
    server.pid()
    status = _cat_through(server, "cs-confined", test_image, prefix)
    assert confined(dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line))


def test_sigterm_removes_the_socket_and_pid_files(server: Server) -> None:
    pid = server.pid()
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not _alive(pid), timeout=30, what="the server to end")
    assert not server.sock.exists()
    assert not server.pidfile.exists()


@pytest.mark.parametrize("verb", ["events", "logs -f"])
def test_long_running_verbs_run_in_their_client(
    server: Server, cli: Cli, test_image: str, names: list[str], verb: str
) -> None:
    """``events`` and ``logs -f`` are the process that was started: the server's death
    doesn't end them, and their own end leaves nothing behind."""
    args: list[str] = []
    if verb == "logs -f":
        names.append("cs-follow")
        ticking = "while true; do echo tick; sleep 0.2; done"
        made = cli("run", "-d", "--name", "cs-follow", test_image, "sh", "-c", ticking)
        assert made.returncode == 0, made.stderr
        args = ["cs-follow"]
    pid = server.pid()
    with subprocess.Popen(
        server.argv(verb, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=server.env
    ) as follower:
        try:
            lines = _lines(follower.stdout)

            def live() -> bool:
                if verb == "events":
                    assert cli("run", "--rm", test_image, "true").returncode == 0
                return not lines.empty()

            wait_for(live, timeout=60, what=f"ctrexec {verb} to print")
            assert server.children() == []  # not handed over: it runs in its client
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: not _alive(pid), timeout=30, what="the killed server to end")
            while not lines.empty():
                lines.get()
            wait_for(live, timeout=60, what=f"ctrexec {verb} to print after the server died")
            assert follower.poll() is None
        finally:
            follower.kill()
        assert follower.wait(timeout=60) == -signal.SIGKILL


def test_a_handed_over_command_dies_with_its_server(
    server: Server, test_image: str, names: list[str]
) -> None:
    """The child that runs a command is killed by the kernel when its server dies: it
    is not left running under PID 1 with no one to wait for it."""
    names.append("cs-orphan")
    pid = server.pid()
    with subprocess.Popen(
        server.argv("run", "--rm", "-i", "--name", "cs-orphan", test_image, "cat"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=server.env,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"handed over\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == b"handed over\n"
        try:
            # Its child runs the command (the echo came through it); a child of an
            # earlier command may still be ending beside it on a loaded host: all go.
            children = server.children()
            assert children, "the command ran in its client, not in the server"
            os.kill(pid, signal.SIGKILL)
            wait_for(
                lambda: not any(_alive(c) for c in children),
                timeout=30,
                what="the server's children to end",
            )
            assert proc.wait(timeout=60) == 125  # "the command server went away"
        finally:
            proc.kill()
            proc.stdin.close()


def _unit(path: Path) -> tuple[list[str], dict[str, str]]:
    """The ExecStart= command line and Environment= of a unit file, as systemd parses them."""
    argv: list[str] = []
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition("=")
        if key == "ExecStart":
            argv = shlex.split(value)
        elif key == "Environment":
            for item in shlex.split(value):
                name, _, setting = item.partition("=")
                env[name] = setting
    return argv, env


def _flock_holders(directory: Path) -> set[int]:
    """The pids that hold a flock on a lock of the tests' namespace in ``directory``
    (the supervisor's presence locks), from /proc/locks."""
    found = directory.glob(f"*-{TEST_NAMESPACE}.lock") if directory.exists() else []
    files = {(os.major(st.st_dev), os.minor(st.st_dev), st.st_ino) for st in map(os.stat, found)}
    holders = set()
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()  # ... FLOCK ADVISORY READ PID MAJ:MIN:INODE START END
        major, minor, inode = fields[-3].split(":")
        if "FLOCK" in fields and (int(major, 16), int(minor, 16), int(inode)) in files:
            holders.add(int(fields[-4]))
    return holders


def test_the_systemd_unit_runs_the_supervisor_itself(server: Server) -> None:
    """The unit's ExecStart as systemd runs it (its Environment=, no terminal; the
    program is this checkout's client, %i the tests' namespace, with the tests'
    containerd address): the process started holds the supervisor's presence lock,
    while a warm command server listens beside it."""
    unit = Path(__file__).parents[2] / "contrib/systemd/ctrexec-supervise@.service"
    argv, env = _unit(unit)
    assert Path(argv[0]).name == "ctrexec" and argv[1] == "supervise"
    argv = [*CLIENT, *(a.replace("%i", TEST_NAMESPACE) for a in argv[1:])]
    argv += ["--address", server.cli.address]
    server.pid()
    locks = Path("/run/ctrexec/supervise")
    with subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**server.env, **env},
        start_new_session=True,
    ) as supervisor:
        try:
            wait_for(
                lambda: _flock_holders(locks) != set(),
                timeout=60,
                what="a supervisor to hold its presence lock",
            )
            assert _flock_holders(locks) == {supervisor.pid}
            assert server.children() == []
        finally:
            supervisor.terminate()  # KillSignal=SIGTERM, KillMode=process
            supervisor.wait(timeout=60)
    wait_for(lambda: _flock_holders(locks) == set(), timeout=30, what="the lock to go")


def _lock_holders(lock: Path) -> set[int]:
    """The pids that hold a flock on ``lock`` (a server's, for its whole life)."""
    if not lock.exists():
        return set()
    st = lock.stat()
    holders = set()
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()  # ... FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END
        major, minor, inode = fields[-3].split(":")
        key = (int(major, 16), int(minor, 16), int(inode))
        if "FLOCK" in fields and key == (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino):
            holders.add(int(fields[-4]))
    return holders


def _cat_running(srv: Server, name: str, test_image: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        srv.argv("run", "--rm", "-i", "--name", name, test_image, "cat"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=srv.env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"{name}\n".encode())
    proc.stdin.flush()
    assert proc.stdout.readline() == f"{name}\n".encode()  # it runs
    return proc


def _end_cat(proc: subprocess.Popen[bytes]) -> None:
    _, err = proc.communicate(timeout=60)  # stdin's end ends cat; closes the pipes
    assert proc.returncode == 0, err


def test_the_first_command_runs_in_its_client_and_the_server_starts_after(
    make_server: Callable[..., Server], test_image: str, names: list[str]
) -> None:
    """With no server, the first command is run by the process that was started (its
    client: multi-threaded with gRPC's threads, which a handed-over client never is),
    and no server exists while it runs (none holds the install's lock, no socket): the
    server's warm-up is not beside the command. After the command's exit a server
    listens, at normal priority (SCHED_OTHER), and so are the children that run the
    next commands."""
    srv = make_server()
    names += ["cs-first", "cs-second"]
    first = _cat_running(srv, "cs-first", test_image)
    try:
        wait_for(
            lambda: len(os.listdir(f"/proc/{first.pid}/task")) > 1,
            timeout=60,
            what="the first command's gRPC threads in its client",
        )
        assert _lock_holders(srv.lock) == set(), "a server started beside the command"
        assert not srv.sock.exists()
    finally:
        _end_cat(first)
    pid = srv.pid()  # bounded wait: started at the first command's exit
    assert pid != first.pid
    assert os.sched_getscheduler(pid) == os.SCHED_OTHER
    second = _cat_running(srv, "cs-second", test_image)
    try:
        children = srv.children()
        assert children, "the second command ran in its client, not in the server"
        assert {os.sched_getscheduler(c) for c in children} == {os.SCHED_OTHER}
    finally:
        _end_cat(second)
