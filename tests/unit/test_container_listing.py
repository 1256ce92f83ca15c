"""The container listing past one message's limit (issue 40): List's answer is refused
(ResourceExhausted) at ~1,600 records, and the listing is read again with ListStream,
one record a message; that namespace is streamed from then on. A listing below the
limit stays one List (a stream costs more per record). No other error is retried.

containerd is faked at the connection: the calls made, and what each answered.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest

from ctrexec import _rpc, errors
from ctrexec._api.containerd.services.containers.v1 import containers_pb2
from ctrexec.containerd import containers
from ctrexec.containerd.client import Client


def _record(cid: str) -> containers_pb2.Container:
    return containers_pb2.Container(id=cid, labels={"k": "v"})


class _Stream:
    """A server stream: its messages, then ``error`` (raised as the seam raises it)."""

    def __init__(self, messages: list[Any], error: Exception | None) -> None:
        self._it: Iterator[Any] = iter(messages)
        self._error = error
        self.cancelled = False

    def __iter__(self) -> _Stream:
        return self

    def __next__(self) -> Any:
        for message in self._it:
            return message
        if self._error is not None:
            raise self._error
        raise StopIteration

    def cancel(self) -> None:
        self.cancelled = True


class _Conn:
    address = "/run/fake.sock"

    def __init__(self, ids: list[str], list_error: Exception | None = None) -> None:
        self.ids = ids
        self.list_error = list_error
        self.calls: list[tuple[str, Any, Any]] = []
        self.streams: list[_Stream] = []

    def server_stream(self, service: str, method: str, request: Any, rt: Any, **kw: Any) -> Any:
        assert rt is containers_pb2.ListContainerMessage
        self.calls.append((method, list(request.filters), kw.get("timeout")))
        self.streams.append(_Stream([rt(container=_record(i)) for i in self.ids], None))
        return self.streams[-1]

    def unary(self, service: str, method: str, request: Any, rt: Any, **kw: Any) -> Any:
        assert rt is containers_pb2.ListContainersResponse
        self.calls.append((method, list(request.filters), kw.get("timeout")))
        if self.list_error is not None:
            raise self.list_error
        return rt(containers=[_record(i) for i in self.ids])


@pytest.fixture(autouse=True)
def _nothing_streamed_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(containers, "_streamed", set())


def _client(conn: _Conn, namespace: str = "ns") -> Client:
    return Client(cast(_rpc.Connection, conn), namespace=namespace)


def test_a_listing_below_the_limit_is_one_list_with_the_filters() -> None:
    conn = _Conn(["a", "b", "c"])
    found = containers.list_containers(_client(conn), 'labels."k"==v')
    assert [c.id for c in found] == ["a", "b", "c"]
    assert conn.calls == [("List", ['labels."k"==v'], None)]


def test_a_refused_list_is_read_again_as_a_stream_and_the_namespace_streamed_after() -> None:
    conn = _Conn(["a", "b"], errors.ResourceExhausted("larger than max (20140548 vs. 16777216)"))
    found = containers.list_containers(_client(conn), "f")
    assert [c.id for c in found] == ["a", "b"]
    assert [(m, f) for m, f, _ in conn.calls] == [("List", ["f"]), ("ListStream", ["f"])]
    assert conn.streams[0].cancelled  # nothing of the call is left behind
    again = containers.list_containers(_client(conn))
    assert [c.id for c in again] == ["a", "b"]
    assert [m for m, _, _ in conn.calls[2:]] == ["ListStream"]
    other = containers.list_containers(_client(conn, namespace="small"))  # its own limit
    assert [c.id for c in other] == ["a", "b"]
    assert [m for m, _, _ in conn.calls[3:]] == ["List", "ListStream"]


@pytest.mark.parametrize(
    "error", [errors.Unavailable("gone"), errors.NotFound("ns"), errors.Unimplemented("no")]
)
def test_no_other_error_is_retried(error: errors.CtrexecError) -> None:
    conn = _Conn(["a"], error)
    with pytest.raises(type(error)):
        containers.list_containers(_client(conn))
    assert [m for m, _, _ in conn.calls] == ["List"]
