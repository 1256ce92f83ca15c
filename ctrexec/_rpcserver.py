"""The gRPC server seam: with :mod:`ctrexec._rpc`, the only module that imports grpc.

ctrexec serves gRPC in one place only: as a plugin that a host (Nomad, through
HashiCorp's go-plugin) starts and talks to over a unix socket. Everything above this
module hands in plain async callables keyed by method name and raises ctrexec errors;
this module builds the handlers from the service descriptors, runs them on
``grpc.aio`` (so thousands of long-lived calls cost no thread each), serves go-plugin's
side services (health, controller, stdio), and turns every error into a status.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import grpc
from google.protobuf import any_pb2, descriptor, message_factory
from google.protobuf.message import Message

from ctrexec import errors
from ctrexec._api.google.rpc import status_pb2
from ctrexec._api.goplugin import grpc_controller_pb2, grpc_stdio_pb2
from ctrexec._api.health.v1 import health_pb2

#: A method's implementation: a coroutine for unary calls, an async iterator for streams.
Handler = Callable[[Any], Awaitable[Message]] | Callable[[Any], AsyncIterator[Message]]
#: Builds the status detail for an error a retry may fix (None: not recoverable).
DetailFor = Callable[[errors.CtrexecError], Message | None]

_ERROR_TO_CODE: tuple[tuple[type[errors.CtrexecError], grpc.StatusCode], ...] = (
    (errors.InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.NotFound, grpc.StatusCode.NOT_FOUND),
    (errors.AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (errors.FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.Unavailable, grpc.StatusCode.UNAVAILABLE),
    (errors.DeadlineExceeded, grpc.StatusCode.DEADLINE_EXCEEDED),
    (errors.PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (errors.Unimplemented, grpc.StatusCode.UNIMPLEMENTED),
    (errors.Canceled, grpc.StatusCode.CANCELLED),
    (errors.ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
)
_DETAILS_KEY = "grpc-status-details-bin"
HEALTH_SERVICE = "plugin"
MAX_STREAMS = 1 << 20


def status_code(exc: errors.CtrexecError) -> grpc.StatusCode:
    for cls, code in _ERROR_TO_CODE:
        if isinstance(exc, cls):
            return code
    return grpc.StatusCode.INTERNAL


def status_of(exc: errors.CtrexecError, detail: Message | None) -> tuple[Any, str, tuple[Any, ...]]:
    """(code, message, trailing metadata) for ``exc``. With a detail, the code is
    FAILED_PRECONDITION and the detail rides as google.rpc.Status in the trailers,
    which is how go-plugin peers read a "recoverable" flag (``status.Details()``)."""
    text = str(exc) or type(exc).__name__
    if detail is None:
        return status_code(exc), text, ()
    code = grpc.StatusCode.FAILED_PRECONDITION
    packed = any_pb2.Any()
    packed.Pack(detail)
    rich = status_pb2.Status(code=code.value[0], message=text, details=[packed])
    return code, text, ((_DETAILS_KEY, rich.SerializeToString()),)


def _unary(fn: Any, detail_for: DetailFor) -> Callable[[Any, Any], Awaitable[Message]]:
    async def call(request: Any, context: Any) -> Message:
        try:
            result: Message = await fn(request)
        except errors.CtrexecError as exc:
            code, text, trailers = status_of(exc, detail_for(exc))
            await context.abort(code, text, trailing_metadata=trailers)
            raise  # abort raises; this keeps type checkers sure nothing returns
        return result

    return call


def _stream(fn: Any, detail_for: DetailFor) -> Callable[[Any, Any], AsyncIterator[Message]]:
    """A server stream; ``request`` is one message, or for a bidi call the request stream."""

    async def call(request: Any, context: Any) -> AsyncIterator[Message]:
        try:
            async for item in fn(request):
                yield item
        except errors.CtrexecError as exc:
            code, text, trailers = status_of(exc, detail_for(exc))
            await context.abort(code, text, trailing_metadata=trailers)

    return call


def service_handler(
    service: descriptor.ServiceDescriptor,
    methods: Mapping[str, Handler],
    detail_for: DetailFor = lambda _exc: None,
) -> Any:
    """A generic handler for ``service``: methods not given answer UNIMPLEMENTED."""
    table = {}
    for m in service.methods:
        fn = methods.get(m.name)
        if fn is None:
            continue
        if m.client_streaming and not m.server_streaming:
            raise errors.Unimplemented(f"{m.full_name}: client streams are not served here")
        request = message_factory.GetMessageClass(m.input_type)
        wrap: Callable[[Any, DetailFor], Callable[[Any, Any], Any]]
        if m.client_streaming:
            kind, wrap = grpc.stream_stream_rpc_method_handler, _stream  # requests in
        elif m.server_streaming:
            kind, wrap = grpc.unary_stream_rpc_method_handler, _stream
        else:
            kind, wrap = grpc.unary_unary_rpc_method_handler, _unary
        table[m.name] = kind(
            wrap(fn, detail_for),
            request_deserializer=request.FromString,
            response_serializer=lambda msg: msg.SerializeToString(),
        )
    return grpc.method_handlers_generic_handler(service.full_name, table)


class PluginServer:
    """A grpc.aio server on a unix socket, plus go-plugin's side services.

    ``shutdown`` is set by GRPCController.Shutdown (go-plugin's Kill) or by the owner;
    ``serve`` then stops the server, cancelling the long-lived calls.
    """

    def __init__(self, socket_path: str, handlers: Sequence[Any]) -> None:
        self.socket_path = socket_path
        self.shutdown = asyncio.Event()
        self._server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", 64 * 1024 * 1024),
                ("grpc.max_send_message_length", 64 * 1024 * 1024),
                # Nomad uses one connection for every task, and each task holds a
                # WaitTask and a TaskStats call open: HTTP/2's default of 100
                # concurrent streams would stall the node at about 48 tasks.
                ("grpc.max_concurrent_streams", MAX_STREAMS),
            ]
        )
        self._server.add_generic_rpc_handlers([*handlers, *self._side_services()])

    def _side_services(self) -> list[Any]:
        health = health_pb2.DESCRIPTOR.services_by_name["Health"]
        control = grpc_controller_pb2.DESCRIPTOR.services_by_name["GRPCController"]
        stdio = grpc_stdio_pb2.DESCRIPTOR.services_by_name["GRPCStdio"]
        return [
            service_handler(health, {"Check": self._check, "Watch": self._watch}),
            service_handler(control, {"Shutdown": self._controller_shutdown}),
            service_handler(stdio, {"StreamStdio": self._stdio}),
        ]

    async def _check(self, request: health_pb2.HealthCheckRequest) -> Message:
        if request.service not in ("", HEALTH_SERVICE):
            raise errors.NotFound(f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)

    async def _watch(self, request: health_pb2.HealthCheckRequest) -> AsyncIterator[Message]:
        yield await self._check(request)
        await self.shutdown.wait()

    async def _controller_shutdown(self, _request: Message) -> Message:
        self.shutdown.set()
        return grpc_controller_pb2.Empty()

    async def _stdio(self, _request: Message) -> AsyncIterator[Message]:
        """Held open and silent: the plugin logs to stderr, which go-plugin reads itself.
        A host may open it again after a reattach; each call just waits."""
        await self.shutdown.wait()
        return
        yield grpc_stdio_pb2.StdioData()  # pragma: no cover - makes this an async generator

    async def start(self) -> None:
        if self._server.add_insecure_port(f"unix:{self.socket_path}") == 0:
            raise errors.Unavailable(f"cannot listen on {self.socket_path}")
        await self._server.start()

    async def wait_and_stop(self, grace: float = 0.5) -> None:
        await self.shutdown.wait()
        with contextlib.suppress(asyncio.CancelledError):
            await self._server.stop(grace)
