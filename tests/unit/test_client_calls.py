"""Client._call_or_none: containerd's NotFound is an answer (None); any other error is not.
The raw RPC is private since issue 38; its old public names warn for one release."""

from __future__ import annotations

from typing import Any, cast

import pytest
from google.protobuf import empty_pb2

from ctrexec import _rpc, errors
from ctrexec.containerd.client import Client


class _Conn:
    def __init__(self, error: errors.CtrexecError | None) -> None:
        self.error = error
        self.seen: dict[str, Any] = {}

    def unary(self, service: str, method: str, request: Any, rt: Any, **kw: Any) -> Any:
        self.seen = kw
        if self.error is not None:
            raise self.error
        return rt()


def _client(error: errors.CtrexecError | None) -> tuple[Client, _Conn]:
    conn = _Conn(error)
    return Client(cast(_rpc.Connection, conn), namespace="ns"), conn


def test_not_found_is_none() -> None:
    client, _ = _client(errors.NotFound("snapshot x: not found"))
    got = client._call_or_none(_rpc.SNAPSHOTS, "Stat", empty_pb2.Empty(), empty_pb2.Empty)
    assert got is None


def test_an_answer_and_the_options_go_through() -> None:
    client, conn = _client(None)
    got = client._call_or_none(
        _rpc.TASKS, "Delete", empty_pb2.Empty(), empty_pb2.Empty, lease="l", timeout=5.0
    )
    assert isinstance(got, empty_pb2.Empty)
    assert conn.seen == {"namespace": "ns", "lease": "l", "timeout": 5.0}


def test_other_errors_are_raised() -> None:
    client, _ = _client(errors.Unavailable("containerd went away"))
    with pytest.raises(errors.Unavailable):
        client._call_or_none(_rpc.TASKS, "Delete", empty_pb2.Empty(), empty_pb2.Empty)


def test_the_old_public_raw_rpc_names_still_work_and_say_they_are_deprecated() -> None:
    client, conn = _client(None)
    with pytest.warns(DeprecationWarning, match=r"Client\.call is deprecated"):
        got = client.call(_rpc.TASKS, "Delete", empty_pb2.Empty(), empty_pb2.Empty, lease="l")
    assert isinstance(got, empty_pb2.Empty)
    assert conn.seen == {"namespace": "ns", "lease": "l", "timeout": None}
    with pytest.warns(DeprecationWarning, match=r"Client\.call_or_none is deprecated"):
        got = client.call_or_none(_rpc.TASKS, "Delete", empty_pb2.Empty(), empty_pb2.Empty)
    assert isinstance(got, empty_pb2.Empty)
    with pytest.warns(DeprecationWarning, match=r"Client\.rpc is deprecated"):
        raw = client.rpc
    assert raw is cast(Any, conn)
