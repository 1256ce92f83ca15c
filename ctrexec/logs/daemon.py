"""The shared log daemon: one process drains the FIFOs of every ``json-file`` task.

Why: a log process per task (:mod:`ctrexec.logs.driver`, run by the shim for a
``binary://`` URI) costs each task start ~25 ms until the driver is ready, and each
task ~3.5 MiB of memory, more than its share of a grouped shim. Here a task's stdout
and stderr are plain FIFO paths in ``Tasks.Create``: the runc v2 shim opens them
itself (after ``runc create``, both ends, so a reader may come and go) and copies
the task's pipes into them. This daemon holds the read ends, cuts lines, and writes
docker's json-file format with the same :class:`~ctrexec.logs.driver.LogWriter`
(rotation, timestamps, the stream split) as the per-task driver.

What it relies on (Linux ``fs/pipe.c``): a FIFO opened ``O_RDONLY|O_NONBLOCK`` before
any writer reports no hang-up until a writer has come and gone, so a registration
made before ``Tasks.Create`` waits quietly; the shim closes its ends when the task's
output ends (at the exit), which ends the stream here. A FIFO opened while its writer
is already gone would never report the hang-up: :meth:`_Daemon._probe` opens and
closes a write end once, which turns "no writer" into an end of stream and does
nothing while the shim still writes. Every registration is probed once
:data:`PROBE_AFTER` after it was made (past the shim's 30 s FIFO open timeout), so a
task whose create failed, or whose client died before ``drop``, is not kept for ever.

An interactive (``-t``/``-i``) task's registration also names the FIFOs its attached
client reads: what is logged is copied there too, never waiting for a client that is
not there (:mod:`ctrexec.logs.copies`).

Registrations are files under ``<state>/streams``, so a daemon that was killed and
started again adopts the streams of tasks still running. Its keepers, which notice
its death and start it again, are in :mod:`ctrexec.tasks.logkeeper` (the supervisor
every few seconds, ``ps``, ``inspect``, ``logs``, doctor, the next task start); with
``<state>`` wiped, they find the runs again from containerd's records and the FIFOs
next to each log (a "recovered" registration: only FIFOs no other daemon holds).
While no daemon runs, a task's output waits in the FIFO (64 KiB) and then blocks the
task's writes; nothing is lost unless the task exits meanwhile, or the killed daemon
had read part of a line it had not written yet (that part is gone).

It exits when it has had nothing to do for :data:`IDLE_EXIT` seconds (environment
``CTREXEC_LOGD_IDLE``), after removing its socket, so a host with no ctrexec tasks
runs no ctrexec process. Its imports are the standard library's cheap modules and
:mod:`ctrexec.logs.driver`; the client half is :mod:`ctrexec.logs.client`.
"""

# The daemon is one process for every task, but its memory is still a share of each
# task's cost: os.path over pathlib (re, fnmatch), try/except over contextlib.
# ruff: noqa: PTH100, PTH101, PTH103, PTH108, PTH116, PTH117, PTH118, PTH120, PTH123, PTH208, SIM105

from __future__ import annotations

import errno
import fcntl
import json
import os
import selectors
import socket
import stat
import sys
import time

from ctrexec.logs import copies as logcopies
from ctrexec.logs import driver as logdriver
from ctrexec.logs import holders, statefiles

TYPE_CHECKING = False  # typing costs the daemon's start ~8 ms; see logdriver
if TYPE_CHECKING:
    import signal
    from collections.abc import Sequence
else:
    import _signal as signal

#: The argument that marks the daemon's command line (``ps``, the benchmark's count).
NAME = "ctrexec-logd"
SOCKET = "logd.sock"
LOCK = "logd.lock"
PIDFILE = "logd.pid"
STREAMS_DIR = "streams"
#: Seconds with no registration and no client before the daemon exits.
IDLE_EXIT = 30.0
IDLE_ENV = "CTREXEC_LOGD_IDLE"
#: A registration this old is probed for a writer once (the shim waits 30 s at most
#: for a FIFO's reader; the daemon opened the reader before the task was created).
PROBE_AFTER = 40.0
READ_CHUNK = 64 * 1024
#: Reads per ready stream per loop turn, so one chatty task cannot starve the others.
READS_PER_TURN = 4
MAX_REQUEST = 64 * 1024
#: The bound on the daemon's CPU: entries per second one task may log (environment
#: ``CTREXEC_LOGD_RATE``; 0 for none). Each entry costs the daemon 4-7 us, so a task
#: logging 200k lines/s would take a core (``docs/benchmarks.md``); over its
#: budget, a task's FIFOs are not read until the next window, and its writes wait on
#: the full pipe as on a slow terminal: the task is slowed, nothing is lost.
LINE_RATE = 50_000
RATE_ENV = "CTREXEC_LOGD_RATE"
#: The rate's window, in seconds: short enough that a throttled task only pauses.
RATE_WINDOW = 0.1


class _Stream:
    """The read end of one FIFO (a task's stdout or stderr) and its unfinished line."""

    def __init__(self, fd: int, name: str, fifo: str, copy: str | None) -> None:
        self.fd = fd
        self.name = name
        self.fifo = fifo
        self.copy = logcopies.Copy(copy) if copy else None
        self.blocked = -1  # the copy's fd while its client is slow: the FIFO is not read
        self.splitter = logdriver.LineSplitter()
        self.last_data = time.monotonic()
        self.finished = False


class _Registration:
    """One run of one task: its FIFOs, the log they go to, and who waits for the end."""

    def __init__(self, token: str, log: str, streams: list[_Stream], created: float) -> None:
        self.token = token
        self.log = log
        self.streams = streams
        self.created = created
        self.probed = False
        self.window_end = 0.0
        self.entries = 0  # in the current window
        self.paused = False

    @property
    def finished(self) -> bool:
        return all(s.finished for s in self.streams)


class _Conn:
    """A client connection: bytes of its request line until the newline."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.waiting_for: str | None = None  # a log path, for "wait"


class _Daemon:
    def __init__(self, state: str, idle_exit: float, rate: int = LINE_RATE) -> None:
        self.state = state
        self.idle_exit = idle_exit
        self.budget = max(1, int(rate * RATE_WINDOW)) if rate > 0 else 0
        self.sel = selectors.DefaultSelector()
        self.regs: dict[str, _Registration] = {}
        self.writers: dict[str, tuple[logdriver.LogWriter, int]] = {}
        self.conns: set[_Conn] = set()
        self.idle_since = time.monotonic()
        self.stopping = False
        self.listener: socket.socket | None = None
        self.bound = 0

    # -- set-up

    def listen(self) -> None:
        path = os.path.join(self.state, SOCKET)
        try:
            os.unlink(path)  # a dead daemon's; the lock says none runs
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
        os.chmod(path, 0o600)
        self.bound = os.stat(path).st_ino  # its own, unlike one bound after a wipe
        sock.listen(128)
        sock.setblocking(False)
        self.listener = sock
        self.sel.register(sock, selectors.EVENT_READ, self._accept)

    def adopt(self) -> None:
        """Take over the registrations a previous daemon left (it died or was stopped)."""
        where = os.path.join(self.state, STREAMS_DIR)
        try:
            names = sorted(os.listdir(where))
        except FileNotFoundError:
            return
        for name in names:
            path = os.path.join(where, name)
            if not name.endswith(".json"):
                continue
            try:
                with open(path, encoding="utf-8") as f:
                    data = json.load(f)
                self._add(data, persist=False)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                _log(f"dropping registration {name}: {exc}")
                _unlink(path)

    # -- requests

    def _accept(self, _mask: int) -> None:
        assert self.listener is not None
        try:
            sock, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        uid = _peer_uid(sock)
        if uid != os.geteuid():
            # The socket is 0600 in a 0700 directory; this is the daemon's own word.
            _log(f"refused a connection from uid {uid}")
            sock.close()
            return
        sock.setblocking(False)
        conn = _Conn(sock)
        self.conns.add(conn)
        self.sel.register(sock, selectors.EVENT_READ, lambda m: self._on_conn(conn))

    def _on_conn(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(MAX_REQUEST)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data or len(conn.buf) + len(data) > MAX_REQUEST:
            self._hang_up(conn)
            return
        conn.buf += data
        if b"\n" not in conn.buf:
            return
        line = conn.buf.split(b"\n", 1)[0]
        try:
            request = json.loads(line)
            reply = self._handle(request, conn)
        except (ValueError, KeyError, TypeError) as exc:
            reply = {"error": f"bad request: {exc}"}
        except OSError as exc:
            reply = {"error": str(exc)}
        if reply is not None:
            self._reply(conn, reply)

    def _handle(self, request: dict[str, object], conn: _Conn) -> dict[str, object] | None:
        op = request["op"]
        if op == "add":
            self._add(request, persist=True)
            return {"ok": True}
        if op == "drop":
            self._drop(str(request.get("token") or ""), str(request.get("log") or ""))
            return {"ok": True}
        if op == "wait":
            log = str(request["log"])
            if any(r.log == log for r in self.regs.values()):
                conn.waiting_for = log
                return None
            return {"ok": True}
        if op == "settle":  # the task exited: write what its pipes hold (client.settle)
            return {"ok": True, "read": self._settle(str(request["log"]))}
        if op == "dropped":
            found = self.writers.get(str(request["log"]))
            return {"ok": True, "pending": found[0].unmarked if found else 0}
        if op == "ping":
            return {"ok": True, "pid": os.getpid(), "registrations": len(self.regs)}
        raise KeyError(f"unknown op {op!r}")

    def _reply(self, conn: _Conn, reply: dict[str, object]) -> None:
        try:
            conn.sock.setblocking(True)
            conn.sock.settimeout(1.0)
            conn.sock.sendall(json.dumps(reply).encode() + b"\n")
        except OSError:
            pass
        self._hang_up(conn)

    def _hang_up(self, conn: _Conn) -> None:
        if conn in self.conns:
            self.conns.discard(conn)
            try:
                self.sel.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
            conn.sock.close()

    # -- registrations

    def _add(self, data: dict[str, object], *, persist: bool) -> None:
        token = str(data["token"])
        if not token.isalnum():
            raise ValueError(f"bad token {token!r}")
        if token in self.regs:
            return  # a recovery that raced the start which made it: one reader per FIFO
        log = str(data["log"])
        max_size, max_files = int(str(data["max_size"])), int(str(data["max_files"]))
        fifos, copies = data["streams"], data.get("copies") or {}
        assert isinstance(fifos, dict) and isinstance(copies, dict)
        created = float(str(data.get("created") or time.time()))
        record = {
            "token": token,
            "log": log,
            "max_size": max_size,
            "max_files": max_files,
            "streams": fifos,
            "copies": copies,
            "created": created,
        }
        names = [n for n in logdriver.STREAMS if n in fifos]  # a terminal's: stdout alone
        if not names:
            raise ValueError("a registration needs a stream")
        recovered = bool(data.get("recovered"))
        if recovered:
            # Found again after the state dir was lost: only the FIFOs still there and
            # read by no other daemon (one that lost its socket reads on), with no copies
            # (their client went with the lost state).
            names = [n for n in names if holders.is_fifo(str(fifos[n]))]
            if not names or holders.held_by(NAME, [str(fifos[n]) for n in names]):
                return
            copies = record["copies"] = {}
        streams = [
            self._open_fifo(
                str(fifos[n]), n, str(copies.get(n) or ""), make=not recovered and persist
            )
            for n in names
        ]
        if persist:
            statefiles.write_json(self._reg_path(token), record)
        reg = _Registration(token, log, streams, created)
        self._writer_for(log, max_size, max_files)
        self.regs[token] = reg
        for s in streams:
            self._watch(reg, s)
            if persist and s.copy is not None:
                s.copy.connect()  # the starting client reads: its stream starts now
        if time.time() - created >= PROBE_AFTER:
            self._probe(reg)  # adopted, old: its writers may be gone for good

    def _open_fifo(self, path: str, name: str, copy: str, *, make: bool) -> _Stream:
        if not all(os.path.isabs(p) for p in (path, copy or "/")):
            raise ValueError(f"FIFO paths must be absolute: {path!r}, {copy!r}")
        if make:
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            try:
                os.mkfifo(path, 0o600)
            except FileExistsError:
                pass
        if not stat.S_ISFIFO(os.lstat(path).st_mode):
            raise ValueError(f"not a FIFO: {path}")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        return _Stream(fd, name, path, copy or None)

    def _writer_for(self, log: str, max_size: int, max_files: int) -> logdriver.LogWriter:
        found = self.writers.get(log)
        if found is not None:
            self.writers[log] = (found[0], found[1] + 1)
            return found[0]
        writer = logdriver.LogWriter(log, max_size=max_size, max_files=max_files, notify=_log)
        writer.open()
        self.writers[log] = (writer, 1)
        return writer

    def _probe(self, reg: _Registration) -> None:
        """Open and close a write end: with no other writer, the stream now ends."""
        reg.probed = True
        for s in reg.streams:
            if s.finished:
                continue
            try:
                fd = os.open(s.fifo, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                continue
            logdriver.close_quietly(fd)

    def _watch(self, reg: _Registration, stream: _Stream) -> None:
        self.sel.register(stream.fd, selectors.EVENT_READ, lambda m: self._drain(reg, stream))

    def _over_budget(self, reg: _Registration) -> bool:
        """Count the window's entries; a task over its budget is not read until the
        window ends (:data:`LINE_RATE`)."""
        if not self.budget:
            return False
        now = time.monotonic()
        if now >= reg.window_end:
            # A read may overshoot the budget by one chunk's lines: the next window pays.
            reg.window_end, reg.entries = now + RATE_WINDOW, max(0, reg.entries - self.budget)
        if reg.entries < self.budget:
            return False
        reg.paused = True
        for s in reg.streams:
            if not s.finished:
                try:
                    self.sel.unregister(s.fd)
                except (KeyError, ValueError):
                    pass
        return True

    def _resume(self, reg: _Registration) -> None:
        reg.paused = False
        for s in reg.streams:
            if not s.finished and s.blocked < 0:
                self._watch(reg, s)

    def _block(self, reg: _Registration, stream: _Stream) -> None:
        """Stop reading a stream until its slow client took the copy (:mod:`copies`)."""
        assert stream.copy is not None
        if stream.blocked >= 0:
            return
        try:
            self.sel.unregister(stream.fd)
        except (KeyError, ValueError):
            pass
        stream.blocked = stream.copy.fd
        unblock = lambda m: self._unblock(reg, stream)  # noqa: E731
        self.sel.register(stream.blocked, selectors.EVENT_WRITE, unblock)

    def _unblock(self, reg: _Registration, stream: _Stream, *, force: bool = False) -> None:
        assert stream.copy is not None
        if not (stream.copy.flush() or force):
            return
        try:
            self.sel.unregister(stream.blocked)
        except (KeyError, ValueError):
            pass
        stream.blocked = -1
        if not (reg.paused or stream.finished or force):
            self._watch(reg, stream)

    def _end_copy(self, reg: _Registration, stream: _Stream) -> None:
        if stream.copy is not None:
            if stream.blocked >= 0:
                self._unblock(reg, stream, force=True)
            stream.copy.end()
            stream.copy = None

    def _drain(self, reg: _Registration, stream: _Stream, *, limit: bool = True) -> int:
        """Read what the FIFO holds (a turn's share with ``limit``, else all); bytes read."""
        writer, read = self.writers[reg.log][0], 0
        for _ in range(READS_PER_TURN if limit else sys.maxsize):
            if limit and (reg.paused or self._over_budget(reg)):
                return read
            try:
                data = os.read(stream.fd, READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                return read
            except OSError as exc:
                if exc.errno == errno.EAGAIN:
                    return read
                data = b""
            if not data:
                self._end_stream(reg, stream)
                return read
            read += len(data)
            now = time.time_ns()
            stream.last_data = time.monotonic()
            pieces = stream.splitter.feed(data)
            reg.entries += len(pieces)
            for piece in pieces:
                writer.write(stream.name, piece, now)
            if stream.copy is not None and not stream.copy.send(data):
                self._block(reg, stream)
                return read
        return read

    def _settle(self, log: str) -> int:
        """Write everything the FIFOs of ``log``'s runs hold now, and each stream's
        unfinished last line (asked once the task exited: no more of that line comes);
        the bytes read. A stream waiting on a slow attached client is left to it."""
        read = 0
        for reg in [r for r in self.regs.values() if r.log == log]:
            for s in reg.streams:
                if not s.finished and s.blocked < 0:
                    read += self._drain(reg, s, limit=False)
                if not s.finished and s.blocked < 0:
                    self._flush(reg, s)
        return read

    def _flush(self, reg: _Registration, stream: _Stream) -> None:
        writer = self.writers[reg.log][0]
        for piece in stream.splitter.flush():
            writer.write(stream.name, piece, time.time_ns())

    def _end_stream(self, reg: _Registration, stream: _Stream) -> None:
        self._flush(reg, stream)
        stream.finished = True
        try:
            self.sel.unregister(stream.fd)
        except (KeyError, ValueError):
            pass
        self._end_copy(reg, stream)
        logdriver.close_quietly(stream.fd)
        _unlink(stream.fifo)
        if reg.finished:
            self._finish(reg)

    def _finish(self, reg: _Registration) -> None:
        self.regs.pop(reg.token, None)
        _unlink(self._reg_path(reg.token))
        writer, count = self.writers[reg.log]
        if count > 1:
            self.writers[reg.log] = (writer, count - 1)
        else:
            writer.close()
            del self.writers[reg.log]
        if not any(r.log == reg.log for r in self.regs.values()):
            for conn in [c for c in self.conns if c.waiting_for == reg.log]:
                self._reply(conn, {"ok": True})

    def _drop(self, token: str, log: str) -> None:
        """Forget registrations (one by token, or all of a log), keeping what was read."""
        for reg in list(self.regs.values()):
            if reg.token != token and (not log or reg.log != log):
                continue
            for s in reg.streams:
                self._end_copy(reg, s)  # the task is gone: its log first, no client waited for
                if not s.finished:
                    self._drain(reg, s, limit=False)
                if not s.finished:
                    self._end_stream(reg, s)

    def _reg_path(self, token: str) -> str:
        return os.path.join(self.state, STREAMS_DIR, token + ".json")

    # -- the loop

    def serve(self, wake_fd: int) -> None:
        self.sel.register(wake_fd, selectors.EVENT_READ, lambda m: self._woken(wake_fd))
        while not self.stopping:
            for key, mask in self.sel.select(self._timeout()):
                key.data(mask)
            self._tick()
        self._shutdown()

    def _woken(self, fd: int) -> None:
        try:
            data = os.read(fd, 64)
        except OSError:
            return
        if signal.SIGTERM in data or signal.SIGINT in data:
            self.stopping = True

    def _timeout(self) -> float:
        now = time.monotonic()
        waits = [self.idle_exit - (now - self.idle_since)]
        for reg in self.regs.values():
            if not reg.probed:
                waits.append(reg.created + PROBE_AFTER - time.time())
            if reg.paused:
                waits.append(reg.window_end - now)
            waits.extend(
                logdriver.PARTIAL_IDLE - (now - s.last_data)
                for s in reg.streams
                if not s.finished and s.splitter.pending
            )
        return max(0.01, min(waits))

    def _tick(self) -> None:
        now = time.monotonic()
        for reg in list(self.regs.values()):
            if reg.paused and now >= reg.window_end:
                self._resume(reg)
            for s in reg.streams:
                quiet = now - s.last_data >= logdriver.PARTIAL_IDLE
                if not s.finished and s.splitter.pending and quiet:
                    self._flush(reg, s)  # a quiet pipe: the task may have exited mid-line
            if not reg.probed and time.time() - reg.created >= PROBE_AFTER:
                self._probe(reg)
        if self.regs or self.conns:
            self.idle_since = now
        elif now - self.idle_since >= self.idle_exit:
            self.stopping = True

    def _shutdown(self) -> None:
        """Go, leaving the registrations for the next daemon (unless none are left)."""
        path = os.path.join(self.state, SOCKET)
        try:
            if os.stat(path).st_ino == self.bound:  # not a successor's, after a wipe
                os.unlink(path)
        except OSError:
            pass
        for reg in self.regs.values():
            for s in reg.streams:
                if not s.finished:
                    self._flush(reg, s)
        for writer, _ in self.writers.values():
            writer.close()


def _peer_uid(sock: socket.socket) -> int:
    """The connecting process's uid, from the kernel (``struct ucred``: pid, uid, gid)."""
    cred = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    return int.from_bytes(cred[4:8], sys.byteorder)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _log(message: str) -> None:
    try:
        sys.stderr.write(f"{NAME}[{os.getpid()}]: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """``ctrexec-logd STATE_DIR [READY_FD]``: serve until idle; one daemon per STATE_DIR.

    READY_FD gets one byte once the socket listens: ``r`` (this daemon serves) or ``b``
    (another one already does). The serving process forks first, so the process that
    started it can wait for its direct child and leave no zombie.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == NAME:
        args = args[1:]
    state = os.path.abspath(args[0])
    ready = int(args[1]) if len(args) > 1 else -1
    os.makedirs(state, mode=0o700, exist_ok=True)
    os.chmod(state, 0o700)  # also one made before, or by hand: registrations name log paths
    lock = os.open(os.path.join(state, LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        statefiles.tell(ready, b"b")
        return 0
    idle = float(os.environ.get(IDLE_ENV) or IDLE_EXIT)
    rate = int(os.environ.get(RATE_ENV) or LINE_RATE)
    daemon = _Daemon(state, idle, rate)
    daemon.listen()
    daemon.adopt()
    if os.fork():
        os._exit(0)
    statefiles.write_pid(os.path.join(state, PIDFILE))
    wake, _ = logdriver.wakeup_pipe(signal.SIGTERM, signal.SIGINT)
    statefiles.tell(ready, b"r")
    daemon.serve(wake)
    try:
        with open(os.path.join(state, PIDFILE), encoding="ascii") as f:
            mine = f.read().strip() == str(os.getpid())  # not a successor's, after a wipe
    except OSError:
        mine = False
    if mine:
        _unlink(os.path.join(state, PIDFILE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
