"""The command server: ctrexec's imports kept warm, one forked child per command.

The client (:mod:`ctrexec.cli.client`) passes its stdio and working directory fds, argv,
environment and umask; a child takes them on and runs :func:`ctrexec.cli.main.main`, so
a command costs a fork instead of Python's start-up and ~150 ms of imports.

Fork is only safe here because this process stays single-threaded and holds no gRPC
channel, Executor or netlink socket: it imports modules and nothing else (grpc's own
rule: no channel may exist in a parent that forks). It keeps no state: killing it costs
the next command the slow start. A command must run in its caller's namespaces and as
its caller, so a peer of another uid or mount, network, pid or user namespace is told
to run the command itself, as is every peer once a loaded module's file has changed
(the server then goes away, and the next command starts a fresh one).
"""

from __future__ import annotations

import array
import contextlib
import errno
import fcntl
import gc
import importlib
import io
import os
import selectors
import signal
import socket
import stat
import struct
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from ctrexec import die_with_parent
from ctrexec.cli import client as wire

#: The command line's own modules the verbs import, loaded once before the first fork
#: (the library's: :func:`ctrexec.preload`). Import only: a module that started a thread
#: or opened a channel here would break every child.
WARM_MODULES = (
    "ctrexec.cli.main", "ctrexec.cli.terminal", "ctrexec.cli.progress",
    "ctrexec.cli.publish", "ctrexec.cli.views.ps", "ctrexec.cli.views.inspect",
    "ctrexec.cli.views.images",
)  # fmt: skip
#: The namespaces a command must share with its caller.
NAMESPACES = ("mnt", "net", "pid", "user")
#: How long a connected client may take to send its request.
REQUEST_TIMEOUT = 5.0
_FD_SIZE = array.array("i").itemsize


@dataclass
class _Command:
    """One running child and the connection of the client that asked for it."""

    pid: int
    conn: socket.socket
    pidfd: int
    done: bool = False


@dataclass
class _State:
    listener: socket.socket | None
    lock: int
    paths: tuple[str, str, str]
    mtimes: dict[str, int]
    selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    commands: dict[int, _Command] = field(default_factory=dict)  # by pidfd
    #: The read end of the pipe SIGTERM's handler writes to (see :func:`_on_sigterm`).
    term: int = -1
    term_write: int = -1


def main() -> None:
    os.chdir("/")
    directory = wire.server_dir()
    paths = wire.socket_paths(directory)
    _ensure_directory(directory)
    lock = _take_lock(paths[1])
    if lock is None:
        return  # another server holds this install's lock
    with _in_the_background():
        for name in WARM_MODULES:
            importlib.import_module(name)
        _warm_parsing()
        _warm_data()
    # What is loaded now stays: a child's collections skip it, and so leave its pages
    # shared with this process instead of copying them to update the objects' headers.
    gc.collect()
    gc.freeze()
    state = _State(None, lock, paths, _mtimes())
    watch_sigterm(state)  # first: a SIGTERM as it binds still removes what it made
    state.listener = _bind(paths)
    state.selector.register(state.listener, selectors.EVENT_READ)
    idle = float(os.environ.get(wire.SERVER_IDLE_ENV) or wire.DEFAULT_SERVER_IDLE)
    _serve(state, idle)


def watch_sigterm(state: _State) -> None:
    """SIGTERM stops the listening and removes the socket and pid files (in the loop:
    the handler only has Python's C handler write the number to a pipe).

    The commands running then finish and their clients get their exit codes; the
    server exits after the last one.
    """
    read, write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    state.term, state.term_write = read, write
    signal.signal(signal.SIGTERM, lambda _n, _f: None)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    state.selector.register(read, selectors.EVENT_READ)


@contextlib.contextmanager
def _in_the_background() -> Iterator[None]:
    """The warm-up at the lowest CPU priority, then back to the one it started with
    (which its children take).

    Its ~150 ms of imports run while the commands that found no server yet run
    in-process; at the same priority they made those slower than without a server on a
    small loaded host. The server is in a session, so an autogroup, of its own
    (``setsid``): the autogroup's nice is lowered too (``/proc/self/autogroup``), or
    its own nice would not weigh against other sessions.
    """
    # only a session's leader's autogroup is its own (spawn_server's setsid)
    autogroup = Path("/proc/self/autogroup" if os.getsid(0) == os.getpid() else os.devnull)
    before = os.getpriority(os.PRIO_PROCESS, 0)
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, 19)
    with contextlib.suppress(OSError):
        autogroup.write_text("19")
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, before)
        with contextlib.suppress(OSError):
            autogroup.write_text("0")


def _warm_parsing() -> None:
    """Build every verb's parser once and parse a command line, so that each command's
    own parse finds argparse's patterns, and ours, in ``re``'s cache; then build the
    parser the children take (:func:`ctrexec.cli.main.build_parser_ahead`)."""
    from ctrexec.cli.main import build_parser, build_parser_ahead

    build_parser().parse_args(["ps"])
    build_parser_ahead()


def _warm_data() -> None:
    """Load the library's modules and read the data files a command reads, once: the
    default seccomp profile (with ``importlib.resources``, zipfile and tempfile) is
    parsed in every ``run`` otherwise."""
    from ctrexec import preload

    preload()


def _ensure_directory(directory: str) -> None:
    """A root-only directory: no other user may reach the socket in it."""
    Path(directory).mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise SystemExit(f"ctrexec: {directory} is not a directory of uid {os.geteuid()}")
    if stat.S_IMODE(info.st_mode) & 0o077:
        Path(directory).chmod(0o700)


def _take_lock(path: str) -> int | None:
    """This install's lock, held for the server's life; None if another server holds it.

    A client holds it (shared) for an instant to see whether a server is starting, so
    a few tries, not one.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    for _ in range(5):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            time.sleep(0.01)
    os.close(fd)
    return None


def _bind(paths: tuple[str, str, str]) -> socket.socket:
    """Listen on the socket path, replacing a stale file (the lock says no server owns it)."""
    sock_path, _, pid_path = paths
    Path(sock_path).unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path)
    listener.listen(64)
    listener.setblocking(False)
    tmp = Path(f"{pid_path}.{os.getpid()}")
    tmp.write_text(f"{os.getpid()}\n")
    tmp.replace(pid_path)
    return listener


def _mtimes() -> dict[str, int]:
    files = {
        module.__file__
        for name, module in list(sys.modules.items())
        if name.split(".")[0] == "ctrexec" and getattr(module, "__file__", None)
    }
    return {path: _mtime(path) for path in files if path}


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns  # noqa: PTH116 (a third of Path's cost; per command)
    except OSError:
        return -1


def _stale(state: _State) -> bool:
    return any(_mtime(path) != mtime for path, mtime in state.mtimes.items())


def _serve(state: _State, idle: float) -> None:
    last = time.monotonic()
    while state.listener is not None or state.commands:
        timeout = None if state.commands else max(0.0, last + idle - time.monotonic())
        events = state.selector.select(timeout)
        if not events and not state.commands:
            break  # idle
        for key, _mask in events:
            if key.fileobj == state.term:
                _on_sigterm(state)
            elif key.fileobj is state.listener:
                _accept(state)
            elif isinstance(key.data, _Command):
                if key.fileobj is key.data.conn:
                    _on_client(state, key.data)
                else:
                    _on_exit(state, key.data)
        last = time.monotonic()
    _stop_listening(state)


def _on_sigterm(state: _State) -> None:
    with contextlib.suppress(OSError):
        os.read(state.term, 64)
    _stop_listening(state)


def _stop_listening(state: _State) -> None:
    """Give up the socket and the lock: the next client starts a fresh server."""
    if state.listener is None:
        return
    sock_path, _, pid_path = state.paths
    for path in (sock_path, pid_path):  # ours: no other server binds without the lock
        with contextlib.suppress(OSError):
            Path(path).unlink()
    state.selector.unregister(state.listener)
    state.listener.close()
    state.listener = None
    os.close(state.lock)


def _accept(state: _State) -> None:
    """Take one client's request, and either tell it to run the command itself or fork
    the child that runs it.

    Exactly one of them runs a command. The client runs it only when its connection
    ends (or says RUN_HERE) before ACCEPTED; so ACCEPTED is sent by the child itself,
    and only once the server has let it go on (a byte on ``go``), after everything
    here that can fail. Until then the child waits and runs nothing: if the server
    dies or fails first, the child reads the end of ``go``, exits without running
    the command, and the client, seeing its connection end with no ACCEPTED, runs it.
    """
    assert state.listener is not None
    try:
        conn, _ = state.listener.accept()
    except (BlockingIOError, InterruptedError):
        return
    fds: list[int] = []
    go = pid = -1
    try:
        conn.settimeout(REQUEST_TIMEOUT)
        fds, request = _receive(conn)
        refusal = _refusal(conn, state)
        if refusal is not None:
            if refusal == wire.STALE:  # first: the client may start the next one at once
                _stop_listening(state)
            conn.sendall(wire.REPLY.pack(wire.RUN_HERE, refusal))
            conn.close()
            return
        wait, go = os.pipe2(os.O_CLOEXEC)
        try:
            pid = os.fork()
        finally:
            if pid != 0:  # the server (or fork failed): the child's end is the child's
                os.close(wait)
        if pid == 0:
            os.close(go)
            _child(state, conn, fds, request, wait)
        pidfd = os.pidfd_open(pid)
    except (OSError, ValueError):
        conn.close()
        if go >= 0:
            os.close(go)  # a forked child reads its end and exits, the command unrun
        if pid > 0:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)  # its exit closes its copy of the connection
        return
    finally:
        for fd in fds:
            os.close(fd)
    command = _Command(pid, conn, pidfd)
    conn.setblocking(False)
    state.commands[pidfd] = command
    state.selector.register(pidfd, selectors.EVENT_READ, command)
    state.selector.register(conn, selectors.EVENT_READ, command)
    with contextlib.suppress(OSError):  # EPIPE: the child is dead already, unrun
        os.write(go, b"g")  # from here on the child may run it (and says so: ACCEPTED)
    os.close(go)


def _receive(conn: socket.socket) -> tuple[list[int], tuple[list[bytes], list[bytes], int]]:
    """The passed fds and the decoded request; ValueError (fds closed) if malformed."""
    data, ancillary, flags, _ = conn.recvmsg(
        65536, socket.CMSG_SPACE(wire.PASSED_FDS * _FD_SIZE), socket.MSG_CMSG_CLOEXEC
    )
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % _FD_SIZE])
    try:
        if flags & socket.MSG_CTRUNC or len(fds) != wire.PASSED_FDS:
            data = b""  # refused below, with the fds closed
        return list(fds), _read_body(conn, data)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _read_body(conn: socket.socket, data: bytes) -> tuple[list[bytes], list[bytes], int]:
    if not data:
        raise ValueError("expected stdin, stdout, stderr and the working directory")
    head = len(wire.MAGIC) + 4
    while len(data) < head:
        data += _recv_some(conn)
    if data[: len(wire.MAGIC)] != wire.MAGIC:
        raise ValueError("not a ctrexec request")
    (size,) = struct.unpack_from("!I", data, len(wire.MAGIC))
    if size > wire.MAX_REQUEST:
        raise ValueError("request too large")
    while len(data) < head + size:
        data += _recv_some(conn)
    return wire.decode_request(data[head : head + size])


def _recv_some(conn: socket.socket) -> bytes:
    chunk = conn.recv(65536)
    if not chunk:
        raise ValueError("request cut short")
    return chunk


def _refusal(conn: socket.socket, state: _State) -> int | None:
    """Why this peer must run the command itself, or None."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    if uid != os.geteuid() or not _same_namespaces(pid):
        return wire.REFUSED
    if confinement_differences(confinement(pid), confinement("self")):
        return wire.REFUSED
    if _stale(state):
        return wire.STALE
    return None


def _same_namespaces(pid: int) -> bool:
    try:
        return all(
            Path(f"/proc/{pid}/ns/{ns}").readlink() == Path(f"/proc/self/ns/{ns}").readlink()
            for ns in NAMESPACES
        )
    except OSError:
        return False


#: The lines of /proc/PID/status a child would take from the server instead of from
#: its caller: credentials, capabilities, no_new_privs, seccomp, CPU and memory nodes.
CONFINEMENT_STATUS = (
    "Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs",
    "Seccomp", "Seccomp_filters", "Cpus_allowed", "Mems_allowed",
)  # fmt: skip
#: Other /proc/PID files that must read the same: the LSM label, cgroups, rlimits.
CONFINEMENT_FILES = ("attr/current", "cgroup", "limits")


def confinement(pid: int | str) -> dict[str, str] | None:
    """What confines process ``pid`` (or ``"self"``), as text to compare; None when its
    status can't be read (it went away).

    A file that can't be read is kept as its error's name: ``attr/current`` is EINVAL
    without an LSM, and it is so for both sides alike.
    """
    base = f"/proc/{pid}"
    try:
        with open(f"{base}/status", encoding="utf-8", errors="replace") as status:  # noqa: PTH123
            lines = status.read().splitlines()
    except OSError:
        return None
    found: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.partition(":")
        if sep and key in CONFINEMENT_STATUS:
            found[key] = " ".join(value.split())
    for name in CONFINEMENT_FILES:
        try:
            with open(f"{base}/{name}", encoding="utf-8", errors="replace") as file:  # noqa: PTH123
                found[name] = file.read()
        except OSError as exc:
            found[name] = f"<{errno.errorcode.get(exc.errno or 0, 'error')}>"
    return found


def confinement_differences(peer: dict[str, str] | None, own: dict[str, str] | None) -> list[str]:
    """What confines a caller (``peer``) otherwise than this server (``own``): if
    anything, a child would run its command less confined (or more), so it runs it.

    A seccomp filter can't be compared (the kernel shows their number, not what they
    allow), so a caller under any filter is always different; unread status too.
    """
    if peer is None or own is None:
        return ["status"]
    differ = [
        key for key in (*CONFINEMENT_STATUS, *CONFINEMENT_FILES) if peer.get(key) != own.get(key)
    ]
    if peer.get("Seccomp", "0") != "0" and "Seccomp" not in differ:
        differ.append("Seccomp")
    return differ


def _on_client(state: _State, command: _Command) -> None:
    """Signal numbers to pass on; the end of the connection kills the command."""
    try:
        data = command.conn.recv(64)
    except BlockingIOError:
        return
    except OSError:
        data = b""
    if not data:
        state.selector.unregister(command.conn)
        with contextlib.suppress(ProcessLookupError):
            os.kill(command.pid, signal.SIGKILL)  # as if the killed client had run it
        command.done = True
        return
    for number in data:
        if number in wire.FORWARDED:
            with contextlib.suppress(ProcessLookupError):
                os.kill(command.pid, number)


def _on_exit(state: _State, command: _Command) -> None:
    _, status = os.waitpid(command.pid, 0)
    state.selector.unregister(command.pidfd)
    os.close(command.pidfd)
    del state.commands[command.pidfd]
    if not command.done:
        state.selector.unregister(command.conn)
        if os.WIFSIGNALED(status):
            reply = wire.REPLY.pack(wire.KILLED, os.WTERMSIG(status))
        else:
            reply = wire.REPLY.pack(wire.EXITED, os.waitstatus_to_exitcode(status))
        command.conn.setblocking(True)
        with contextlib.suppress(OSError):
            command.conn.sendall(reply)
    command.conn.close()


def _child(
    state: _State,
    conn: socket.socket,
    fds: list[int],
    request: tuple[list[bytes], list[bytes], int],
    wait: int,
) -> NoReturn:
    """Become the client's process and run its command; never returns.

    It runs nothing until the server says go on ``wait`` (see :func:`_accept`), and
    then first tells the client ACCEPTED (with its pid): from then on the client never
    runs the command itself. Its keeper is the server, which kills it when the client's
    connection ends; the kernel kills it when the server dies (``PR_SET_PDEATHSIG``, set
    before the go: a server dead before then closed ``go`` and this child ends unrun).
    """
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        die_with_parent(signal.SIGKILL)
        if os.read(wait, 1) != b"g":
            os._exit(125)  # the server died or failed before the go: the client runs it
        os.close(wait)
        conn.settimeout(REQUEST_TIMEOUT)
        conn.sendall(wire.REPLY.pack(wire.ACCEPTED, os.getpid()))
    except BaseException:
        os._exit(125)
    try:
        os.setpgid(0, 0)
        _drop_server(state, conn)
        argv, env, umask = request
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        os.fchdir(fds[3])
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.environb.clear()
        for item in env:
            key, sep, value = item.partition(b"=")
            if sep and key:
                os.environb[key] = value
        os.umask(umask)
        sys.argv = [os.fsdecode(arg) for arg in argv]
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _rebuild_stdio()
    except BaseException:
        os._exit(125)
    _run_command()


def _drop_server(state: _State, conn: socket.socket) -> None:
    """Close the server's fds in the child: the lock above all, or it outlives us."""
    state.selector.close()
    if state.listener is not None:
        state.listener.close()
    os.close(state.lock)
    for fd in (state.term, state.term_write):
        if fd >= 0:
            os.close(fd)
    for command in state.commands.values():
        command.conn.close()
        os.close(command.pidfd)
    conn.close()


def _rebuild_stdio() -> None:
    """sys.stdin, stdout and stderr over the passed fds, as Python's start-up makes them."""
    encoding, errors = sys.stdout.encoding, sys.stdout.errors
    for fd, name, mode in ((0, "stdin", "rb"), (1, "stdout", "wb"), (2, "stderr", "wb")):
        buffered = io.open(fd, mode, closefd=False)  # noqa: SIM115, UP020
        text = io.TextIOWrapper(
            buffered,
            encoding=encoding,
            errors="backslashreplace" if fd == 2 else errors,
            newline="\n",
            line_buffering=fd == 2 or (fd == 1 and os.isatty(fd)),
        )
        setattr(sys, name, text)
        setattr(sys, f"__{name}__", text)


def _run_command() -> NoReturn:
    from ctrexec.cli.main import finish
    from ctrexec.cli.main import main as run

    try:
        code = run()
    except SystemExit as exc:  # argparse's usage errors and --help
        code = _exit_code(exc.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    finish(code)


def _exit_code(value: object) -> int:
    """What Python's start-up makes of ``SystemExit(value)``."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1


if __name__ == "__main__":
    main()
