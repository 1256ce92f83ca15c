"""Talking to the shared log daemon (:mod:`ctrexec.logs.daemon`), and starting it.

A task start asks the daemon to open two FIFOs next to the task's log before
``Tasks.Create`` names them (one request on a unix socket, well under a millisecond);
the first start on a host, or after the daemon went idle, starts it: ~30 ms, once.
Requests are one JSON line each way. Nothing here imports grpc or attrs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import socket
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ctrexec import flocks
from ctrexec.defaults import DEFAULT_LOGD_DIR, LOGD_DIR_ENV
from ctrexec.errors import CtrexecError, DeadlineExceeded, FailedPrecondition
from ctrexec.logs import daemon as logdaemon
from ctrexec.logs import holders
from ctrexec.logs.launcher import boot_source

#: How long a client waits for a daemon it started to listen.
START_TIMEOUT = 10.0
#: How long one request may take (``wait`` has its own timeout).
REQUEST_TIMEOUT = 10.0


def state_dir() -> Path:
    """Where the daemon's socket and registrations live (``CTREXEC_LOGD_DIR``)."""
    return Path(os.environ.get(LOGD_DIR_ENV) or DEFAULT_LOGD_DIR)


def registrations(log_path: str | os.PathLike[str] | None = None) -> list[str]:
    """The runs the daemon reads (those writing ``log_path``, or all), by token, sorted.

    Read from its registration files, not asked of it: a killed daemon's runs still
    count, as its successor adopts them. Tests and benchmarks audit with it.
    """
    where = state_dir() / logdaemon.STREAMS_DIR
    found = []
    for reg in where.glob("*.json") if where.is_dir() else []:
        if log_path is None:
            found.append(reg.stem)
            continue
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            if json.loads(reg.read_text())["log"] == os.fspath(log_path):
                found.append(reg.stem)
    return sorted(found)


def keep_alive(where: Path | None = None) -> bool:
    """Start the daemon again if it has runs to read and does not answer; True if it did.

    The daemon's keeper: it is started by the task start that first needs it, and when
    it dies (killed, OOM) while tasks write, their output waits in the FIFOs and then
    blocks them. Whoever notices calls this (the supervisor every few seconds, and
    ``ps``, ``logs``, ``inspect``, ``doctor --fix``, each task start): the new daemon
    adopts the runs from their registration files and the blocked writers resume. Cheap
    when all is well, as it is on ``ps``'s path: a directory listing and, if it has
    runs, a probe of the lock the daemon holds while it lives (the kernel drops it with
    the daemon, however it died), with no round trip to a daemon that may be busy
    copying. Raises FailedPrecondition when the daemon cannot be started.
    """
    where = state_dir() if where is None else where
    try:
        if not any((where / logdaemon.STREAMS_DIR).glob("*.json")):
            return False  # nothing to read: an idle exit is no death
    except OSError:
        return False
    if flocks.held(where / logdaemon.LOCK):
        return False
    spawn(where)
    return True


def recover(logs: Iterable[tuple[str, int, int]], where: Path | None = None) -> int:
    """Have the daemon read again the FIFOs of runs whose registration files were lost
    (``/run`` wiped): ``logs`` are ``(log path, max size, max files)`` from the
    containers' records; a run's FIFOs are found next to its log (:func:`fifo_paths`).

    The daemon takes only FIFOs that are there and read by no other daemon (one that
    lost its socket reads on), so asking for a run it reads is harmless; a run whose
    shim is gone ends at once (it is probed as an old one). Returns how many runs were
    asked for.
    """
    where = state_dir() if where is None else where
    known = set(registrations_in(where))
    asked = 0
    for log, max_size, max_files in sorted(set(logs)):
        runs: dict[str, dict[str, str]] = {}
        with contextlib.suppress(OSError):
            for fifo in Path(log).parent.glob(".std*-*.fifo"):
                name, _, rest = fifo.name.removeprefix(".").partition("-")
                token = rest.removesuffix(".fifo")
                if fifo.name == _fifo_name(name, token) and token.isalnum():
                    runs.setdefault(token, {})[name] = str(fifo)
        # Read by a daemon already (one that lost its socket, or another place's): no
        # daemon is started for it here (the daemon checks again, for a race).
        held = holders.held(logdaemon.NAME, [p for r in runs.values() for p in r.values()])
        for token, streams in sorted(runs.items()):
            if token in known or held.intersection(streams.values()):
                continue
            message = {
                "op": "add",
                "token": token,
                "log": log,
                "max_size": max_size,
                "max_files": max_files,
                "streams": streams,
                "created": 1.0,  # old: probed at once, so a run whose shim is gone ends
                "recovered": True,
            }
            request(message, where=where)
            asked += 1
    return asked


def registrations_in(where: Path) -> list[str]:
    """The tokens of the runs registered in the daemon directory ``where``."""
    streams = where / logdaemon.STREAMS_DIR
    return sorted(p.stem for p in streams.glob("*.json")) if streams.is_dir() else []


def fifo_paths(log_path: str | os.PathLike[str]) -> tuple[str, str, str]:
    """``(token, stdout FIFO, stderr FIFO)`` for a new run, next to its log file.

    A token per run: the previous run's FIFOs may still be draining.
    """
    token = os.urandom(8).hex()
    where = Path(log_path).parent
    return token, str(where / _fifo_name("stdout", token)), str(where / _fifo_name("stderr", token))


def _fifo_name(stream: str, token: str) -> str:
    """The one name of a run's FIFO (:func:`recover` finds them by it)."""
    return f".{stream}-{token}.fifo" if stream in ("stdout", "stderr") else ""


def register(
    log_path: str | os.PathLike[str],
    max_size: int,
    max_files: int,
    *,
    where: Path | None = None,
    copies: Mapping[str, str] | None = None,
) -> tuple[str, str, str]:
    """Have the daemon open a new run's FIFOs; ``(token, stdout, stderr)`` for Tasks.Create.

    ``where``: the daemon's directory (default :func:`state_dir`). ``copies``: an
    interactive task's client FIFOs by stream, which the daemon also feeds; then the run
    has only those streams (a terminal's: stdout alone, and stderr is "").
    """
    token, out, err = fifo_paths(log_path)
    streams = {"stdout": out, "stderr": err}
    if copies:
        streams = {name: path for name, path in streams.items() if name in copies}
    message = {
        "op": "add",
        "token": token,
        "log": os.fspath(log_path),
        "max_size": max_size,
        "max_files": max_files,
        "streams": streams,
        "copies": dict(copies or {}),
        "created": time.time(),
    }
    request(message, where=where)
    return token, streams.get("stdout", ""), streams.get("stderr", "")


def drop(
    *, token: str = "", log_path: str | os.PathLike[str] = "", where: Path | None = None
) -> None:
    """Forget one run (a start that failed) or every run of a log (the task is removed).

    No daemon running means nothing to forget, so this never starts one.
    """
    request({"op": "drop", "token": token, "log": os.fspath(log_path)}, start=False, where=where)


def wait_drained(
    log_path: str | os.PathLike[str], timeout: float = 5.0, *, where: Path | None = None
) -> None:
    """Return once every run of this log has reached its end of stream and is written.

    The shim closes a task's FIFOs when the task's output ends; after that the log is
    whole. Raises DeadlineExceeded after ``timeout`` (the output is still open: a
    process in the task kept stdout).
    """
    request({"op": "wait", "log": os.fspath(log_path)}, start=False, timeout=timeout, where=where)


#: How long a wait that saw a task's exit gives the daemon to write the rest (:func:`settle`).
SETTLE_TIMEOUT = 10.0


def settle(
    log_path: str | os.PathLike[str], timeout: float = SETTLE_TIMEOUT, *, where: Path | None = None
) -> bool:
    """Return once the daemon has written all its FIFOs of this log held, the last
    unfinished line too: for a task that has exited, so the log is whole. Whether it
    was (False: no daemon to ask; DeadlineExceeded after ``timeout``).

    containerd reports the exit without waiting for the daemon, and an exit need be no
    end of stream (:func:`wait_drained` is for after the delete). The daemon reads each
    FIFO until it is empty and answers how much it read; the shim may still be copying
    the task's last bytes from its pipe into a FIFO, so this asks until an answer reads
    nothing: the FIFOs stayed empty over a whole round trip. A dead daemon is started
    again first (:func:`keep_alive`: it adopts the runs; what the FIFOs held when the
    task exited with no daemon reading is lost, see :mod:`ctrexec.logs.daemon`).
    """
    where = state_dir() if where is None else where
    with contextlib.suppress(FailedPrecondition):  # none can start: no one to ask
        keep_alive(where)
    deadline = time.monotonic() + timeout
    message = {"op": "settle", "log": os.fspath(log_path)}
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded(f"the log daemon did not write {log_path} in {timeout:g} s")
        reply = request(message, start=False, timeout=left, where=where)
        if reply is None:
            return False
        if not reply.get("read"):
            return True


def ping() -> dict[str, Any] | None:
    """The running daemon's pid and registration count, or None when none runs."""
    return request({"op": "ping"}, start=False)


def request(
    message: dict[str, Any],
    *,
    start: bool = True,
    timeout: float = REQUEST_TIMEOUT,
    where: Path | None = None,
) -> dict[str, Any] | None:
    """Send one request; start the daemon first when none listens and ``start``.

    Returns the reply, or None when no daemon runs and ``start`` is false.
    """
    where = state_dir() if where is None else where
    for attempt in range(3):
        try:
            return _exchange(where / logdaemon.SOCKET, message, timeout)
        except (FileNotFoundError, ConnectionError, EOFError):
            # No daemon, or one that was going idle as we came (refused, reset, or
            # closed before it read: EPIPE): start one and try again.
            if not start:
                return None
            if attempt == 2:
                break
            spawn(where)
        except OSError as exc:  # the seam: no bare OSError reaches a wait or a command
            raise FailedPrecondition(
                f"the ctrexec log daemon in {where}: {exc.strerror or exc}"
            ) from exc
    raise FailedPrecondition(f"the ctrexec log daemon in {where} does not answer")


def _exchange(path: Path, message: dict[str, Any], timeout: float) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        data = b""
        try:
            sock.connect(os.fspath(path))
            sock.sendall(json.dumps(message).encode() + b"\n")
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    raise EOFError
                data += chunk
        except TimeoutError as exc:
            raise DeadlineExceeded(
                f"the ctrexec log daemon did not answer {message['op']} in {timeout:g} s"
            ) from exc
    reply: dict[str, Any] = json.loads(data)
    if "error" in reply:
        raise FailedPrecondition(f"log daemon: {reply['error']}")
    return reply


def spawn(where: Path) -> None:
    """Start a daemon for ``where`` and wait until it listens (or another one does).

    Serialised by a lock file, so concurrent first starts make one daemon. The daemon
    forks once it listens, so the child waited for here exits at once.
    """
    where.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(where / "spawn.lock", "a") as lock:  # noqa: PTH123
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(OSError, EOFError, CtrexecError):
            _exchange(where / logdaemon.SOCKET, {"op": "ping"}, 1.0)
            return  # another client started it meanwhile
        if _start(where) == b"b" and _going_away(where):
            _start(where)


def _going_away(where: Path) -> bool:
    """Wait, bounded, for the daemon that holds the lock but did not answer to let it
    go; whether it did. One that is exiting idle has removed its socket already but
    holds the lock until its last writer is closed: on a loaded host, long enough for
    every retry of a client to find no socket and a start that defers to it."""
    deadline = time.monotonic() + START_TIMEOUT
    while flocks.held(where / logdaemon.LOCK):
        if time.monotonic() >= deadline:
            return False  # a live daemon, busy: the client's next connect finds it
        time.sleep(0.02)
    return True


def _start(where: Path) -> bytes:
    """Start a daemon; its answer: ``r`` it listens, ``b`` another holds the lock."""
    import subprocess  # only a start that finds no daemon pays for these two

    from ctrexec.placement import helper_argv

    boot = boot_source(logdaemon.__name__)
    r, w = os.pipe2(os.O_CLOEXEC)
    try:
        with open(where / "logd.log", "ab") as errlog:  # noqa: PTH123
            proc = subprocess.Popen(
                # A scope of its own on a systemd host: the caller's unit may end first.
                helper_argv(
                    "logd", [sys.executable, "-IS", "-c", boot, logdaemon.NAME, str(where), str(w)]
                ),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errlog,
                pass_fds=(w,),
                start_new_session=True,
                close_fds=True,
                cwd="/",
                env=_daemon_env(),
            )
        os.close(w)
        w = -1
        ready, _, _ = select.select([r], [], [], START_TIMEOUT)
        answer = os.read(r, 1) if ready else b""
        proc.wait(START_TIMEOUT)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    if answer not in (b"r", b"b"):
        raise FailedPrecondition(f"the ctrexec log daemon did not start (see {where / 'logd.log'})")
    return answer


def _daemon_env() -> dict[str, str]:
    """Nothing of the caller's environment but what the daemon reads."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    for name in (logdaemon.IDLE_ENV, logdaemon.RATE_ENV):
        if name in os.environ:
            env[name] = os.environ[name]
    return env
