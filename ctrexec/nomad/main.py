"""``nomad-driver-ctrexec``: the process Nomad's agent starts from its plugin_dir.

go-plugin's contract, in order: refuse to run without Nomad's magic cookie (a
person starting the binary by hand gets one line saying what it is); ignore SIGINT
(the plugin shares the agent's process group); listen on a unix socket of our own;
only then print the handshake line ``1|2|unix|<path>|grpc`` on stdout, the only
thing ever written there; log hclog JSON on stderr. Nomad starts and kills the
plugin twice at boot, so grpc and the driver are imported only after the cookie.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
from pathlib import Path

from ctrexec.defaults import NOMAD_SOCKET_DIR_PREFIX, NOMAD_SOCKET_NAME

MAGIC_COOKIE_KEY = "NOMAD_PLUGIN_MAGIC_COOKIE"
MAGIC_COOKIE_VALUE = "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255"
CORE_PROTOCOL = 1
APP_PROTOCOL = 2
NOT_A_PLUGIN = (
    "nomad-driver-ctrexec is a Nomad task driver plugin: Nomad's agent starts it from its"
    " plugin_dir; it is not meant to be run by hand (see docs/nomad.md)"
)


def _app_protocol_ok() -> bool:
    """The host lists the versions it speaks; Nomad sends 2 (gRPC). None listed: fine."""
    offered = os.environ.get("PLUGIN_PROTOCOL_VERSIONS", "")
    return not offered or str(APP_PROTOCOL) in offered.split(",")


def main() -> int:
    if os.environ.get(MAGIC_COOKIE_KEY) != MAGIC_COOKIE_VALUE:
        _say(NOT_A_PLUGIN)
        return 1
    if not _app_protocol_ok():
        _say(
            f"nomad-driver-ctrexec speaks plugin protocol {APP_PROTOCOL}; the host offered"
            f" {os.environ.get('PLUGIN_PROTOCOL_VERSIONS')}"
        )
        return 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Past the cookie and protocol checks: a binary run by hand, or offered the wrong
    # protocol, exits before loading logging, asyncio and grpc.
    from ctrexec.nomad import hclog

    hclog.install()
    # Logging is hclog's before grpc and asyncio load, so their first lines are too.
    import asyncio

    from ctrexec import sweep_nomad_sockets
    from ctrexec.nomad import serve

    sweep_nomad_sockets()  # a SIGKILLed plugin's directory: only a start cleans it
    directory = Path(tempfile.mkdtemp(prefix=NOMAD_SOCKET_DIR_PREFIX))
    socket_path = directory / NOMAD_SOCKET_NAME
    try:
        asyncio.run(serve.run(str(socket_path), _handshake))
    finally:
        with contextlib.suppress(OSError):
            socket_path.unlink()
        with contextlib.suppress(OSError):
            directory.rmdir()
    return 0


def _handshake(socket_path: str) -> None:
    """Print the line, then point fd 1 at /dev/null: go-plugin discards the rest, and
    after the agent dies a write there would fail with EPIPE."""
    line = f"{CORE_PROTOCOL}|{APP_PROTOCOL}|unix|{socket_path}|grpc\n"
    os.write(1, line.encode())
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)


def _say(line: str) -> None:
    """One line on stderr, if anyone reads it: with stderr closed, ``print(file=None)``
    would write to stdout, go-plugin's handshake channel."""
    if sys.stderr is not None:
        with contextlib.suppress(OSError, ValueError):
            print(line, file=sys.stderr)


def _flush_stdio() -> None:
    """Flush what stdout and stderr buffer; a stream whose reader is gone (EPIPE) or
    that was closed is pointed at /dev/null instead, as CPython's docs advise for
    BrokenPipeError, so that no later flush fails on it: a failed flush at exit is exit
    status 120, not main's."""
    for stream in (sys.stdout, sys.stderr):
        if stream is None:
            continue  # its fd was closed when Python started
        try:
            stream.flush()
        except (OSError, ValueError):
            with contextlib.suppress(OSError, ValueError):
                null = os.open(os.devnull, os.O_WRONLY)
                try:
                    os.dup2(null, stream.fileno())
                finally:
                    os.close(null)


def entry() -> None:
    """The console script: exit without interpreter teardown once served, with main's
    code even when the agent that read stdout and stderr is gone."""
    code = main()
    _flush_stdio()
    os._exit(code)
