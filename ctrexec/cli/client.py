"""The ``ctrexec`` program's first step: hand the command to the warm command server.

Every command run in-process pays ~150 ms of imports (grpc, protobuf, the stubs, attrs)
before its work; :mod:`ctrexec.cli.server` keeps them loaded and forks a child per
command that takes this process's stdin, stdout, stderr and working directory (their
fds, with ``SCM_RIGHTS``), its argv, environment and umask. So this module loads only
builtin modules (``_socket`` and ``_signal``, not ``socket`` and ``signal``, which load
``enum`` and ``selectors``); whenever the server can't take the command, it runs here
exactly as before (:func:`ctrexec.cli.main.entry`).

It is also the one owner of the socket's path and of the wire format, which the server
imports from here.
"""

from __future__ import annotations

# os.path, not pathlib: pathlib loads re, fnmatch and urllib (the client's whole budget).
# ruff: noqa: PTH100, PTH118, PTH120
import _signal  # type: ignore[import-not-found]
import _socket
import os
import select
import struct
import sys
import zlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

#: The command server's settings, the command line's own (the library has no server): a
#: root-only (0700) directory holding, per install, its socket, lock file and pid file,
#: under ctrexec's run directory (``ctrexec.defaults.RUN_DIR``); the variable moves it
#: (tests). ``NO_SERVER_ENV=1``: every command runs in its own process. The server exits
#: after ``SERVER_IDLE_ENV`` (else ``DEFAULT_SERVER_IDLE``) seconds without a command.
SERVER_DIR = "/run/ctrexec/cli"
SERVER_DIR_ENV = "CTREXEC_SERVER_DIR"
NO_SERVER_ENV = "CTREXEC_NO_SERVER"
SERVER_IDLE_ENV = "CTREXEC_SERVER_IDLE"
DEFAULT_SERVER_IDLE = 300.0
#: A request: ``MAGIC``, the body's length, then the body (see :func:`encode_request`).
MAGIC = b"CTX1"
_LENGTH = struct.Struct("!I")
_HEAD = struct.Struct("!III")  # umask, argc, envc
#: A request larger than this is refused (an environment is a few KiB).
MAX_REQUEST = 4 << 20
#: The fds a request carries: stdin, stdout, stderr and the working directory.
PASSED_FDS = 4
#: Server -> client replies, five bytes each: a kind and a signed 32-bit value.
REPLY = struct.Struct("!ci")
ACCEPTED = b"A"  # the child (this pid) runs the command: from here on, never run it here
RUN_HERE = b"R"  # run it yourself; the value says why
EXITED = b"X"  # the command's exit code
KILLED = b"K"  # the command was killed by this signal
#: Why a command is run here: refused (another uid or namespace: not an error), or the
#: server's code changed on disk and it is going away (start a fresh one).
REFUSED, STALE = 0, 1
#: What the client forwards to the command, as one byte each (client -> server).
FORWARDED = (
    _signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGQUIT, _signal.SIGWINCH,
    _signal.SIGUSR1, _signal.SIGUSR2,
)  # fmt: skip


#: The flags before the verb that take a value (``ctrexec.cli._common.global_flags``).
VALUED_GLOBALS = frozenset({"--address", "-H", "--host", "--namespace", "-n"})
#: Verbs that last as long as their caller wants (days, for ``supervise`` under
#: systemd): they always run in this process, so that they are the process that was
#: started (a unit's main pid, a shell's job) and end with it; their start-up cost does
#: not matter. Shorter commands go to the server, whose child ends when its client's
#: connection does (the server kills it) or when the server dies (PR_SET_PDEATHSIG).
IN_PROCESS_VERBS = frozenset({"supervise", "events", "attach"})


def runs_in_process(argv: list[str]) -> bool:
    """Whether the command line ``argv`` (without the program) is a long-running verb:
    one of :data:`IN_PROCESS_VERBS`, ``logs`` following (``-f``, ``--follow``, a short
    cluster with ``f``) or ``stats`` streaming (without ``--no-stream``). It errs
    towards in-process: a flag's value that looks like ``-f`` only costs the warm start."""
    words = iter(argv)
    verb = None
    for word in words:
        if word in VALUED_GLOBALS:
            next(words, None)
        elif not word.startswith("-"):
            verb = word
            break
    if verb in IN_PROCESS_VERBS:
        return True
    rest = list(words)
    if "--" in rest:
        rest = rest[: rest.index("--")]
    if verb == "logs":
        return any(
            word == "--follow"
            or (word.startswith("-") and not word.startswith("--") and "f" in word)
            for word in rest
        )
    return verb == "stats" and "--no-stream" not in rest


def server_dir() -> str:
    return os.environ.get(SERVER_DIR_ENV) or SERVER_DIR


def install_key(executable: str, package_dir: str) -> str:
    """A name for one install: a clone's venv never talks to another clone's server."""
    key = f"{executable}\0{package_dir}".encode()
    return f"{zlib.crc32(key):08x}{zlib.crc32(key[::-1]):08x}"


def socket_paths(
    directory: str | None = None, package_dir: str | None = None
) -> tuple[str, str, str]:
    """This install's socket, lock file and pid file (another copy's, given its
    package's directory: a test's)."""
    package_dir = package_dir or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    base = os.path.join(directory or server_dir(), install_key(sys.executable, package_dir))
    return f"{base}.sock", f"{base}.lock", f"{base}.pid"


def encode_request(argv: list[bytes], env: list[bytes], umask: int) -> bytes:
    items = b"".join(_LENGTH.pack(len(item)) + item for item in (*argv, *env))
    body = _HEAD.pack(umask, len(argv), len(env)) + items
    return MAGIC + _LENGTH.pack(len(body)) + body


def decode_request(body: bytes) -> tuple[list[bytes], list[bytes], int]:
    """``(argv, env, umask)`` of a request's body; ValueError if it is malformed."""
    if len(body) < _HEAD.size:
        raise ValueError("request too short")
    umask, argc, envc = _HEAD.unpack_from(body)
    items: list[bytes] = []
    at = _HEAD.size
    for _ in range(argc + envc):
        if at + _LENGTH.size > len(body):
            raise ValueError("request truncated")
        (size,) = _LENGTH.unpack_from(body, at)
        at += _LENGTH.size
        if at + size > len(body):
            raise ValueError("request truncated")
        items.append(body[at : at + size])
        at += size
    if at != len(body) or umask > 0o777 or argc == 0:
        raise ValueError("malformed request")
    return items[:argc], items[argc:], umask


def entry() -> NoReturn:
    """The ``ctrexec`` program (``bin/ctrexec``): through the server if it can, else
    in-process."""
    if (
        os.environ.get(NO_SERVER_ENV) != "1"
        and os.geteuid() == 0
        and not runs_in_process(sys.argv[1:])
    ):
        code = _through_server()
        if code is not None:
            os._exit(code)
    from ctrexec.cli.main import entry as in_process

    in_process()


def _through_server() -> int | None:
    """The command's exit code, or None when it is to run in this process."""
    sock_path, lock_path, _ = socket_paths()
    try:
        for fd in range(3):
            os.fstat(fd)  # a closed stdio fd: nothing to pass, run here as before
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    except OSError:
        return None
    try:
        sock.connect(sock_path)
    except OSError:
        sock.close()
        spawn_server_at_exit(lock_path)
        return None
    try:
        return _converse(sock, lock_path)
    finally:
        sock.close()


def _converse(sock: _socket.socket, lock_path: str) -> int | None:
    wake_read, wake_write = os.pipe()
    old: dict[int, object] = {}
    try:
        os.set_blocking(wake_write, False)
        # the C handler writes each number to the pipe; these Python handlers do nothing
        old = {number: _signal.signal(number, _ignore) for number in FORWARDED}
        _signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
        if not _send_request(sock):
            return None
        return _wait(sock, wake_read, lock_path)
    finally:
        _signal.set_wakeup_fd(-1)
        for number, handler in old.items():
            _signal.signal(number, handler)
        os.close(wake_read)
        os.close(wake_write)


def _ignore(_number: int, _frame: object) -> None:
    return None


def _send_request(sock: _socket.socket) -> bool:
    umask = os.umask(0o022)
    os.umask(umask)
    argv = [os.fsencode(arg) for arg in sys.argv]
    env = [key + b"=" + value for key, value in os.environb.items()]
    message = encode_request(argv, env, umask)
    try:
        cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        rights = struct.pack(f"{PASSED_FDS}i", 0, 1, 2, cwd)
        sent = sock.sendmsg([message], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
        # Nothing more once the request is whole: the server may have run the command
        # and closed by now, and even an empty send would then fail (EPIPE) and have
        # the command run here a second time.
        if sent < len(message):
            sock.sendall(message[sent:])
    except OSError:
        return False
    finally:
        os.close(cwd)
    return True


def _wait(sock: _socket.socket, wake: int, lock_path: str) -> int | None:
    accepted = False
    pending = held = b""  # replies read in part; signals that came before the child
    while True:
        ready = select.select([sock.fileno(), wake], [], [])[0]
        if wake in ready:
            held += _read_wake(wake)
        if accepted:
            held = _forward(sock, held)
        if sock.fileno() not in ready:
            continue
        try:
            data = sock.recv(64)
        except OSError:
            data = b""
        if not data:
            if not accepted:
                leave = [n for n in held if n != _signal.SIGWINCH]
                return _die_by(leave[0]) if leave else None  # nothing ran: run it here
            os.write(2, b"ctrexec: the command server went away; the outcome is unknown\n")
            return 125
        pending += data
        while len(pending) >= REPLY.size:
            kind, value = REPLY.unpack_from(pending)
            pending = pending[REPLY.size :]
            if kind == ACCEPTED:
                accepted = True
                held = _forward(sock, held)
            elif kind == RUN_HERE:
                if value == STALE:
                    spawn_server_at_exit(lock_path)
                leave = [n for n in held if n != _signal.SIGWINCH]
                return _die_by(leave[0]) if leave else None
            elif kind == EXITED:
                return int(value)
            elif kind == KILLED:
                return _die_by(int(value))


def _forward(sock: _socket.socket, numbers: bytes) -> bytes:
    """Send the signals' numbers on to the command; what is left to send (nothing)."""
    if numbers:
        try:
            sock.sendall(numbers)
        except OSError:  # the reply, or the end of the connection, says what happened
            return b""
    return b""


def _read_wake(wake: int) -> bytes:
    try:
        return os.read(wake, 64)
    except BlockingIOError:
        return b""


def _die_by(number: int) -> int:
    """End as the command ended, killed by ``number``: what a shell sees of it."""
    _signal.set_wakeup_fd(-1)
    try:
        _signal.signal(number, _signal.SIG_DFL)
        os.kill(os.getpid(), number)
    except (OSError, ValueError):
        pass
    return 128 + number


def spawn_server_at_exit(lock_path: str) -> None:
    """Start the server once this command, run in-process, is done (its atexit hooks
    run before ``ctrexec.cli.main.finish`` exits), with the environment of now.

    Not before: the server's ~150 ms of imports beside the command made the first
    command after an idle exit (and the second, run while the server warmed up) slower
    than an in-process run on a small loaded host.
    """
    import atexit  # here, not at the top: only this path needs it (a builtin module)

    atexit.register(spawn_server, lock_path, dict(os.environ))


def spawn_server(lock_path: str, environ: dict[str, str] | None = None) -> int | None:
    """Start the server, detached, unless one holds the lock (it is starting up); its
    pid, or None.

    The caller does not wait: this command runs in-process and the next finds the
    server warm. ``posix_spawn`` rather than ``subprocess``: nothing more to import.
    It is not niced from its exec: its interpreter's start runs at full weight in a
    session (and autogroup) of its own, so on a loaded host it is listening in
    moments; only its warm-up after that runs at nice 19
    (``ctrexec.cli.server._in_the_background``). ``SCHED_IDLE`` from the exec was
    tried: on a host at load 6-9 the server then took 40 to 300 s to listen.

    Its keeper is the next command: the server is detached (a session of its own,
    reparented to init; on a systemd host a scope of its own too, so the unit of the
    command that started it can end without it: :mod:`ctrexec.placement`), and when
    it dies nothing else notices, nor needs to. It keeps no state; the next client's
    connect fails (no socket, or a stale one no one listens on), that command runs
    in-process, and it starts a new server at its exit.
    """
    try:
        lock = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        lock = -1
    except OSError:
        return None
    if lock >= 0:
        import fcntl

        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a server holds it LOCK_EX
        except OSError:
            return None  # a server holds it: starting up, or going away after a stale answer
        finally:
            os.close(lock)
    # Here, not at the top: only a start of the server loads them (and shutil).
    from ctrexec import helper_argv, helper_placed

    # A scope of its own on a systemd host: the first caller's unit may end first.
    argv = helper_argv("server", [sys.executable, "-P", "-m", "ctrexec.cli.server"])
    null = os.devnull
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, null, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, null, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    try:
        pid = os.posix_spawn(
            argv[0],
            argv,
            environ or os.environ,
            file_actions=actions,
            setsid=True,
        )
    except OSError:
        return None
    if argv[0] != sys.executable:
        # This runs at the command's exit: its unit may end at once and kill its cgroup
        # whole, systemd-run included if it had not yet moved into its scope.
        helper_placed(pid)
    return pid


if __name__ == "__main__":
    entry()
