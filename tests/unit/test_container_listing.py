"""The container listing is streamed (issue 40): one record a message, so no answer
passes gRPC's 16 MiB limit however many containers there are. A server that has no
ListStream answers Unimplemented and is asked with List; no other error is retried.

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
    def __init__(self, ids: list[str], stream_error: Exception | None = None) -> None:
        self.ids = ids
        self.stream_error = stream_error
        self.calls: list[tuple[str, Any, Any]] = []
        self.streams: list[_Stream] = []

    def server_stream(self, service: str, method: str, request: Any, rt: Any, **kw: Any) -> Any:
        assert rt is containers_pb2.ListContainerMessage
        self.calls.append((method, list(request.filters), kw.get("timeout")))
        messages = [] if self.stream_error else [rt(container=_record(i)) for i in self.ids]
        self.streams.append(_Stream(messages, self.stream_error))
        return self.streams[-1]

    def unary(self, service: str, method: str, request: Any, rt: Any, **kw: Any) -> Any:
        assert rt is containers_pb2.ListContainersResponse
        self.calls.append((method, list(request.filters), kw.get("timeout")))
        return rt(containers=[_record(i) for i in self.ids])


def _client(conn: _Conn) -> Client:
    return Client(cast(_rpc.Connection, conn), namespace="ns")


def test_the_listing_is_one_stream_with_the_filters_and_the_default_deadline() -> None:
    conn = _Conn(["a", "b", "c"])
    found = containers.list_containers(_client(conn), 'labels."k"==v')
    assert [c.id for c in found] == ["a", "b", "c"]
    assert conn.calls == [("ListStream", ['labels."k"==v'], None)]
    assert conn.streams[0].cancelled  # nothing of the call is left behind


def test_a_server_without_liststream_is_asked_with_list() -> None:
    conn = _Conn(["a", "b"], errors.Unimplemented("Containers.ListStream: unknown method"))
    found = containers.list_containers(_client(conn), "f")
    assert [c.id for c in found] == ["a", "b"]
    assert [(m, f) for m, f, _ in conn.calls] == [("ListStream", ["f"]), ("List", ["f"])]


@pytest.mark.parametrize(
    "error",
    [errors.ResourceExhausted("too large"), errors.Unavailable("gone"), errors.NotFound("ns")],
)
def test_no_other_error_is_retried_with_list(error: errors.CtrexecError) -> None:
    conn = _Conn(["a"], error)
    with pytest.raises(type(error)):
        containers.list_containers(_client(conn))
    assert [m for m, _, _ in conn.calls] == ["ListStream"]
