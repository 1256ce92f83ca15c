"""The gRPC seam: the only module in ctrexec that imports :mod:`grpc`.

Everything above this module speaks protobuf messages and ctrexec errors. This
module owns the channel to containerd's unix socket, attaches the namespace and
lease headers, sets a deadline, and translates every gRPC status into the error
hierarchy of :mod:`ctrexec.errors` (chained with ``raise ... from``).

Calls are made by method path with the response type given explicitly, so no
generated ``*_pb2_grpc`` module (which would import grpc) is needed anywhere.
"""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Generic, TypedDict, TypeVar, Unpack

import grpc
from google.protobuf.message import Message

from ctrexec import defaults, errors

M = TypeVar("M", bound=Message)

DEFAULT_ADDRESS = defaults.DEFAULT_ADDRESS
ADDRESS_ENV = defaults.ADDRESS_ENV
NAMESPACE_HEADER = "containerd-namespace"
LEASE_HEADER = "containerd-lease"
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: The channel's reconnect backoff, first and longest (ms): a local socket is cheap to retry.
RECONNECT_BACKOFF_MS = (100, 1000)
DEFAULT_TIMEOUT = 30.0
#: What grpc imports at its first channel, not at ``import grpc``: for a process that
#: preloads before it forks (:mod:`ctrexec.preloading`).
FIRST_CHANNEL_MODULES = ("grpc._channel", "grpc._simple_stubs", "grpc.experimental")

#: Service names, as they appear in method paths on the wire.
CONTAINERS = "containerd.services.containers.v1.Containers"
CONTENT = "containerd.services.content.v1.Content"
DIFF = "containerd.services.diff.v1.Diff"
EVENTS = "containerd.services.events.v1.Events"
IMAGES = "containerd.services.images.v1.Images"
INTROSPECTION = "containerd.services.introspection.v1.Introspection"
LEASES = "containerd.services.leases.v1.Leases"
NAMESPACES = "containerd.services.namespaces.v1.Namespaces"
SNAPSHOTS = "containerd.services.snapshots.v1.Snapshots"
TASKS = "containerd.services.tasks.v1.Tasks"
VERSION = "containerd.services.version.v1.Version"


class _NoDeadline:
    """Marker for the few calls that legitimately block forever (Wait, Subscribe)."""


NO_DEADLINE = _NoDeadline()
Timeout = float | _NoDeadline | None


class RpcOptions(TypedDict, total=False):
    """The keyword options of every call: containerd namespace, lease, deadline."""

    namespace: str | None
    lease: str | None
    timeout: Timeout


#: Told of every call: its ``Service.Method`` and the seconds a unary call took
#: (0.0 for calls that only start here: futures and streams).
Observer = Callable[[str, float], None]


def resolve_address(address: str | None = None) -> str:
    """Pick the socket path: explicit argument, then ``$CONTAINERD_ADDRESS``, then default."""
    chosen = address or os.environ.get(ADDRESS_ENV) or DEFAULT_ADDRESS
    return chosen.removeprefix("unix://")


def check_socket(path: str) -> None:
    """Fail early, with a one-line reason, when ``path`` cannot be containerd's socket.

    gRPC itself only reports "failed to connect" after retrying; these checks turn
    the common mistakes into precise errors before a channel is built.
    """
    try:
        st = Path(path).stat()
    except FileNotFoundError as exc:
        raise errors.ConnectError(f"containerd socket {path} does not exist") from exc
    except PermissionError as exc:
        raise errors.ConnectError(f"permission denied reading containerd socket {path}") from exc
    except OSError as exc:
        raise errors.ConnectError(f"cannot use containerd socket {path}: {exc.strerror}") from exc
    if not stat.S_ISSOCK(st.st_mode):
        raise errors.ConnectError(f"{path} is not a unix socket")
    if not os.access(path, os.R_OK | os.W_OK):
        raise errors.ConnectError(f"permission denied on containerd socket {path}")


_CODE_TO_ERROR: dict[grpc.StatusCode, type[errors.CtrexecError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: errors.InvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: errors.InvalidArgument,
    grpc.StatusCode.NOT_FOUND: errors.NotFound,
    grpc.StatusCode.ALREADY_EXISTS: errors.AlreadyExists,
    grpc.StatusCode.ABORTED: errors.Conflict,
    grpc.StatusCode.UNAVAILABLE: errors.Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: errors.DeadlineExceeded,
    grpc.StatusCode.PERMISSION_DENIED: errors.PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: errors.PermissionDenied,
    grpc.StatusCode.UNIMPLEMENTED: errors.Unimplemented,
    grpc.StatusCode.CANCELLED: errors.Canceled,
    grpc.StatusCode.RESOURCE_EXHAUSTED: errors.ResourceExhausted,
}


#: containerd's words when the shim it asked closed the connection before answering.
_SHIM_CLOSED = "ttrpc: closed"


def error_class(code: grpc.StatusCode, message: str) -> type[errors.CtrexecError]:
    """Map a status to ctrexec's class, keeping containerd's FailedPrecondition split.

    containerd sends both ErrConflict and ErrNotModified as FailedPrecondition and
    tells them apart only by the message suffix; its Go client does the same split.
    """
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        if message.endswith(": not modified") or message == "not modified":
            return errors.NotModified
        if message.endswith(": conflict") or message == "conflict":
            return errors.Conflict
        return errors.FailedPrecondition
    if code == grpc.StatusCode.UNKNOWN and _SHIM_CLOSED in message:
        return errors.ShimClosed
    return _CODE_TO_ERROR.get(code, errors.Internal)


#: gRPC's own refusal of a message over a channel's limit, either way (``CLIENT: Sent
#: message larger than max (20983155 vs. 16777216)``): its words, not the user's.
_TOO_LARGE = re.compile(
    r"(?P<way>Sent|Received) message larger than max \((?P<size>\d+) vs\. \d+\)"
)


def translate(exc: grpc.RpcError, what: str) -> errors.CtrexecError:
    """Build the ctrexec error for a failed call; the caller raises it ``from exc``."""
    code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = (exc.details() if isinstance(exc, grpc.Call) else None) or str(exc)
    too_large = _TOO_LARGE.search(details)
    if too_large is not None:
        return errors.ResourceExhausted(f"{what}: {_too_large(too_large)}")
    cls = error_class(code, details)
    return cls(f"{what}: {details}")


def _too_large(match: re.Match[str]) -> str:
    """The last guard for a message over the limit (the config and exec checks come
    first, naming the field): its size against containerd's, in a user's words."""
    size, limit = int(match["size"]) / 2**20, MAX_MESSAGE_BYTES / 2**20
    if match["way"] == "Sent":
        return f"the request is {size:.1f} MiB; containerd accepts at most {limit:.1f} MiB"
    return f"containerd's answer is {size:.1f} MiB; ctrexec reads at most {limit:.1f} MiB"


class Stream(Iterator[M]):
    """A server stream whose iteration raises ctrexec errors and that can be cancelled."""

    def __init__(self, call: grpc.Call, it: Iterator[M], what: str) -> None:
        self._call = call
        self._it = it
        self._what = what

    def __iter__(self) -> Stream[M]:
        return self

    def __next__(self) -> M:
        try:
            return next(self._it)
        except grpc.RpcError as exc:
            raise translate(exc, self._what) from exc

    def cancel(self) -> None:
        """Stop the stream from any thread; a blocked iteration then raises Canceled."""
        self._call.cancel()


class Pending(Generic[M]):
    """A unary call in flight, so a caller can arm it (Tasks.Wait) before acting."""

    def __init__(self, future: grpc.Future, what: str) -> None:
        self._future = future
        self._what = what

    def result(self, timeout: float | None = None) -> M:
        """The response; DeadlineExceeded if it has not come within ``timeout`` seconds."""
        try:
            response: M = self._future.result(timeout=timeout)
        except grpc.FutureTimeoutError as exc:
            raise errors.DeadlineExceeded(f"{self._what}: no answer within {timeout}s") from exc
        except grpc.FutureCancelledError as exc:
            raise errors.Canceled(f"{self._what}: cancelled") from exc
        except grpc.RpcError as exc:
            raise translate(exc, self._what) from exc
        return response

    def done(self) -> bool:
        return bool(self._future.done())

    def add_done_callback(self, fn: Callable[[Pending[M]], None]) -> None:
        """Call ``fn(self)`` on gRPC's thread when the call ends (at once if it has):
        many waiters can then share one call and hold no thread each."""
        self._future.add_done_callback(lambda _f: fn(self))

    def cancel(self) -> None:
        self._future.cancel()


class Connection:
    """One gRPC channel to one containerd socket, shared by every thread.

    grpc channels are thread-safe; a Connection adds no locking of its own beyond
    guarding close().
    """

    def __init__(self, address: str, *, default_timeout: float = DEFAULT_TIMEOUT) -> None:
        self.address = address
        self.default_timeout = default_timeout
        #: Profiling and tests count round trips through this; None costs nothing.
        self.observer: Observer | None = None
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = grpc.insecure_channel(
            f"unix://{address}",
            options=[
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                # containerd's socket is local; one shared subchannel is enough.
                ("grpc.enable_retries", 0),
                # After containerd restarts, calls queued with wait_for_ready (Wait,
                # the event stream) resume within a second, not after gRPC's default
                # backoff that grows to two minutes.
                ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MS[0]),
                ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MS[1]),
            ],
        )

    @property
    def closed(self) -> bool:
        """Whether close() was called: then no call can ever work again (no retry helps)."""
        return self._channel is None

    def _chan(self) -> grpc.Channel:
        channel = self._channel
        if channel is None:
            raise errors.Unavailable(f"connection to {self.address} is closed")
        return channel

    def _timeout(self, timeout: Timeout) -> float | None:
        if isinstance(timeout, _NoDeadline):
            return None
        return self.default_timeout if timeout is None else timeout

    @staticmethod
    def metadata(namespace: str | None, lease: str | None) -> list[tuple[str, str]]:
        md: list[tuple[str, str]] = []
        if namespace:
            md.append((NAMESPACE_HEADER, namespace))
        if lease:
            md.append((LEASE_HEADER, lease))
        return md

    def _method(self, kind: str, service: str, method: str, response_type: type[M]) -> Any:
        """The channel's multi-callable of ``kind`` for one method path."""
        factory = getattr(self._chan(), kind)
        return factory(
            f"/{service}/{method}",
            request_serializer=_serialize,
            response_deserializer=response_type.FromString,
        )

    def unary(
        self,
        service: str,
        method: str,
        request: Message,
        response_type: type[M],
        **options: Unpack[RpcOptions],
    ) -> M:
        """Call one unary method and return its typed response."""
        rpc = self._method("unary_unary", service, method, response_type)
        began = time.perf_counter()
        try:
            response: M = rpc(request, **self._call_args(options))
        except grpc.RpcError as exc:
            raise translate(exc, f"{_short(service)}.{method}") from exc
        finally:
            self._observe(service, method, time.perf_counter() - began)
        return response

    def _observe(self, service: str, method: str, seconds: float) -> None:
        observer = self.observer
        if observer is not None:
            observer(f"{_short(service)}.{method}", seconds)

    def _call_args(self, options: RpcOptions) -> dict[str, Any]:
        return {
            "metadata": self.metadata(options.get("namespace"), options.get("lease")),
            "timeout": self._timeout(options.get("timeout")),
        }

    def unary_future(
        self,
        service: str,
        method: str,
        request: Message,
        response_type: type[M],
        *,
        wait_for_ready: bool = False,
        **options: Unpack[RpcOptions],
    ) -> Pending[M]:
        """Send a unary call now and collect its answer later.

        ``wait_for_ready``: while containerd is unreachable the call waits for it to
        come back (within ``timeout``) instead of failing at once with Unavailable.
        """
        rpc = self._method("unary_unary", service, method, response_type)
        self._observe(service, method, 0.0)
        future = rpc.future(request, wait_for_ready=wait_for_ready, **self._call_args(options))
        return Pending(future, f"{_short(service)}.{method}")

    def server_stream(
        self,
        service: str,
        method: str,
        request: Message,
        response_type: type[M],
        **options: Unpack[RpcOptions],
    ) -> Stream[M]:
        """Open a server-streaming call; iterate the result, cancel it to stop."""
        return self._stream("unary_stream", service, method, request, response_type, options)

    def bidi_stream(
        self,
        service: str,
        method: str,
        requests: Iterable[Message],
        response_type: type[M],
        **options: Unpack[RpcOptions],
    ) -> Stream[M]:
        """Open a bidirectional stream fed by ``requests`` (used by Content.Write)."""
        feed = iter(requests)
        return self._stream("stream_stream", service, method, feed, response_type, options)

    def _stream(  # noqa: PLR0917 -- private; the public callers name every argument
        self,
        kind: str,
        service: str,
        method: str,
        request: Message | Iterator[Message],
        response_type: type[M],
        options: RpcOptions,
    ) -> Stream[M]:
        rpc = self._method(kind, service, method, response_type)
        self._observe(service, method, 0.0)
        call = rpc(request, **self._call_args(options))
        return Stream(call, call, f"{_short(service)}.{method}")

    def close(self) -> None:
        with self._lock:
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()


def _short(service: str) -> str:
    return service.rsplit(".", 1)[-1]
