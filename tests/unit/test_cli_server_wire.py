"""The command server's wire format and the client's import set (both pure, no server)."""

from __future__ import annotations

import _socket
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctrexec import defaults
from ctrexec.cli import client


def test_request_round_trips() -> None:
    argv = [b"ctrexec", b"run", b"--rm", "\u00e9\udcff".encode(errors="surrogateescape")]
    env = [b"PATH=/usr/bin", b"EMPTY=", b"A=b=c"]
    message = client.encode_request(argv, env, 0o027)
    head = len(client.MAGIC) + 4
    assert message[: len(client.MAGIC)] == client.MAGIC
    assert int.from_bytes(message[len(client.MAGIC) : head], "big") == len(message) - head
    assert client.decode_request(message[head:]) == (argv, env, 0o027)


@pytest.mark.parametrize(
    "cut", [1, 5, 12, 13, 20], ids=lambda n: f"{n} bytes short of the head or an item"
)
def test_truncated_request_is_refused(cut: int) -> None:
    body = client.encode_request([b"ctrexec", b"ps"], [b"A=1"], 0o022)[8:]
    with pytest.raises(ValueError, match=r"short|truncated|malformed"):
        client.decode_request(body[: len(body) - cut] if cut < len(body) else b"")


def test_trailing_bytes_and_empty_argv_are_refused() -> None:
    body = client.encode_request([b"ctrexec"], [], 0o022)[8:]
    with pytest.raises(ValueError, match="malformed"):
        client.decode_request(body + b"x")
    with pytest.raises(ValueError, match="malformed"):
        client.decode_request(client.encode_request([], [], 0o022)[8:])


def test_each_install_has_its_own_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    assert client.install_key("/a/.venv/bin/python", "/a/ctrexec") != client.install_key(
        "/b/.venv/bin/python", "/b/ctrexec"
    )
    monkeypatch.setenv("CTREXEC_SERVER_DIR", "/tmp/x")
    sock, lock, pid = client.socket_paths()
    assert sock.startswith("/tmp/x/") and sock.endswith(".sock")
    assert (lock, pid) == (sock[: -len(".sock")] + ".lock", sock[: -len(".sock")] + ".pid")
    monkeypatch.delenv("CTREXEC_SERVER_DIR")
    assert client.socket_paths()[0].startswith("/run/ctrexec/cli/")
    # the CLI owns its server's directory, inside the run directory reboots empty
    assert Path(client.SERVER_DIR).parent == Path(defaults.RUN_DIR)


#: What the client must not load: its start-up is the whole warm command's budget.
NOT_IN_CLIENT = (
    "socket", "signal", "enum", "selectors", "subprocess", "json", "argparse", "typing",
    "re", "pathlib", "collections", "ctrexec.cli.main", "ctrexec.cli._common", "grpc",
)  # fmt: skip


def test_client_loads_only_builtins() -> None:
    # printed as a repr: loading json (and with it re) would hide what the client loads
    probe = "import sys; import ctrexec.cli.client; print(' '.join(sorted(sys.modules)))"
    loaded = set(_run(probe).split())
    assert "ctrexec.cli.client" in loaded
    assert sorted(loaded & set(NOT_IN_CLIENT)) == []


def _run(code: str) -> str:
    """Without site: an editable install's finder loads pathlib and re at start-up."""
    root = str(Path(client.__file__).resolve().parents[2])
    return subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": root},
    ).stdout


def test_a_whole_request_is_not_sent_to_again() -> None:
    """The server may read the request, run the command and close before the client
    goes on; then any further send, even an empty one, fails (EPIPE). The request went
    whole, so the client must say so and wait for the reply, not run the command itself
    a second time (seen under load in CI: a ``netns create`` ran in the server's child
    and again in its client)."""
    mine, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)

    class ServedAtOnce(_socket.socket):
        def sendmsg(self, *args: object) -> int:
            sent: int = super().sendmsg(*args)  # type: ignore[arg-type]
            theirs.recv(1 << 16)
            theirs.close()  # the server has read it, run it and gone
            return sent

    sock = ServedAtOnce(fileno=mine.detach())
    try:
        assert client._send_request(sock)
    finally:
        sock.close()
