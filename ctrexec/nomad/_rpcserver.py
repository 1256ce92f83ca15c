"""The gRPC server seam: with :mod:`ctrexec._rpc`, the only module that imports grpc.

ctrexec serves gRPC in one place only: as a plugin that a host (Nomad, through
HashiCorp's go-plugin) starts and talks to over a unix socket. Everything above this
module hands in plain async callables keyed by method name and raises ctrexec errors;
this module builds the handlers from the service descriptors, runs them on
``grpc.aio`` (so thousands of long-lived calls cost no thread each), serves go-plugin's
side services (health, controller, stdio), and turns every error into a status.

At shutdown the server streams, which never end by themselves, are ended here with
UNAVAILABLE (what go-plugin and Nomad read as "the plugin went away"), and the plugin
waits for grpc.aio's own per-call tasks to finish: a task still pending when the event
loop closes is cancelled, and grpc reports each as an unhandled CancelledError with a
raw traceback on stderr, which go-plugin takes for a log line.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import grpc
from google.protobuf import any_pb2, descriptor, message_factory
from google.protobuf.message import Message

from ctrexec import (
    AlreadyExists,
    Canceled,
    CtrexecError,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
    Unimplemented,
)
from ctrexec._api.google.rpc import status_pb2
from ctrexec._api.goplugin import grpc_controller_pb2, grpc_stdio_pb2
from ctrexec._api.health.v1 import health_pb2

#: A method's implementation: a coroutine for unary calls, an async iterator for streams.
Handler = Callable[[Any], Awaitable[Message]] | Callable[[Any], AsyncIterator[Message]]
#: Builds the status detail for an error a retry may fix (None: not recoverable).
DetailFor = Callable[[CtrexecError], Message | None]

_ERROR_TO_CODE: tuple[tuple[type[CtrexecError], grpc.StatusCode], ...] = (
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
    (DeadlineExceeded, grpc.StatusCode.DEADLINE_EXCEEDED),
    (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (Unimplemented, grpc.StatusCode.UNIMPLEMENTED),
    (Canceled, grpc.StatusCode.CANCELLED),
    (ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
)
_DETAILS_KEY = "grpc-status-details-bin"
HEALTH_SERVICE = "plugin"
MAX_STREAMS = 1 << 20
SHUTTING_DOWN = "the plugin is shutting down"


class LiveStreams:
    """The server streams being served, so that shutdown can end them."""

    def __init__(self) -> None:
        self.closing = False
        self._tasks: set[asyncio.Task[Any]] = set()

    def add(self, task: asyncio.Task[Any] | None) -> None:
        if task is not None:
            self._tasks.add(task)

    def discard(self, task: asyncio.Task[Any] | None) -> None:
        self._tasks.discard(task)

    def end_all(self) -> None:
        """Each stream's handler gets a CancelledError, which :func:`_stream` turns
        into UNAVAILABLE; streams opened from now on get it at once."""
        self.closing = True
        for task in list(self._tasks):
            task.cancel()


def status_code(exc: CtrexecError) -> grpc.StatusCode:
    for cls, code in _ERROR_TO_CODE:
        if isinstance(exc, cls):
            return code
    return grpc.StatusCode.INTERNAL


def status_of(exc: CtrexecError, detail: Message | None) -> tuple[Any, str, tuple[Any, ...]]:
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
        except CtrexecError as exc:
            code, text, trailers = status_of(exc, detail_for(exc))
            await context.abort(code, text, trailing_metadata=trailers)
            raise  # abort raises; this keeps type checkers sure nothing returns
        return result

    return call


def _stream(
    fn: Any, detail_for: DetailFor, live: LiveStreams
) -> Callable[[Any, Any], AsyncIterator[Message]]:
    """A server stream; ``request`` is one message, or for a bidi call the request stream.

    A CancelledError is grpc's (the peer went away: grpc ends the call, so it goes on
    up) unless ``live`` is ending the streams: then the call ends with UNAVAILABLE.
    """

    async def call(request: Any, context: Any) -> AsyncIterator[Message]:
        if live.closing:
            await context.abort(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
        task = asyncio.current_task()
        live.add(task)
        try:
            async for item in fn(request):
                yield item
        except CtrexecError as exc:
            code, text, trailers = status_of(exc, detail_for(exc))
            await context.abort(code, text, trailing_metadata=trailers)
        except asyncio.CancelledError:
            if task is None or not live.closing:
                raise
            task.uncancel()
            await context.abort(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
        finally:
            live.discard(task)

    return call


def service_handler(
    service: descriptor.ServiceDescriptor,
    methods: Mapping[str, Handler],
    detail_for: DetailFor = lambda _exc: None,
    live: LiveStreams | None = None,
) -> Any:
    """A generic handler for ``service``: methods not given answer UNIMPLEMENTED.
    Its server streams join ``live``, if given, to be ended at shutdown."""
    live = live or LiveStreams()
    table = {}
    for m in service.methods:
        fn = methods.get(m.name)
        if fn is None:
            continue
        if m.client_streaming and not m.server_streaming:
            raise Unimplemented(f"{m.full_name}: client streams are not served here")
        request = message_factory.GetMessageClass(m.input_type)
        handler: Callable[[Any, Any], Any]
        if m.client_streaming:  # requests in
            kind, handler = grpc.stream_stream_rpc_method_handler, _stream(fn, detail_for, live)
        elif m.server_streaming:
            kind, handler = grpc.unary_stream_rpc_method_handler, _stream(fn, detail_for, live)
        else:
            kind, handler = grpc.unary_unary_rpc_method_handler, _unary(fn, detail_for)
        table[m.name] = kind(
            handler,
            request_deserializer=request.FromString,
            response_serializer=lambda msg: msg.SerializeToString(),
        )
    return grpc.method_handlers_generic_handler(service.full_name, table)


class PluginServer:
    """A grpc.aio server on a unix socket, plus go-plugin's side services.

    ``shutdown`` is set by GRPCController.Shutdown (go-plugin's Kill) or by the owner;
    :meth:`wait_and_stop` then ends the streams and stops the server, and
    :meth:`settle` waits for what grpc.aio left on the loop.
    """

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.shutdown = asyncio.Event()
        self._live = LiveStreams()
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
        self._server.add_generic_rpc_handlers(self._side_services())

    def add_service(
        self,
        service: descriptor.ServiceDescriptor,
        methods: Mapping[str, Handler],
        detail_for: DetailFor = lambda _exc: None,
    ) -> None:
        """Before :meth:`start`: serve ``methods`` of ``service``."""
        self._server.add_generic_rpc_handlers(
            [service_handler(service, methods, detail_for, self._live)]
        )

    def _side_services(self) -> list[Any]:
        health = health_pb2.DESCRIPTOR.services_by_name["Health"]
        control = grpc_controller_pb2.DESCRIPTOR.services_by_name["GRPCController"]
        stdio = grpc_stdio_pb2.DESCRIPTOR.services_by_name["GRPCStdio"]
        return [
            service_handler(health, {"Check": self._check, "Watch": self._watch}, live=self._live),
            service_handler(control, {"Shutdown": self._controller_shutdown}),
            service_handler(stdio, {"StreamStdio": self._stdio}, live=self._live),
        ]

    async def _check(self, request: health_pb2.HealthCheckRequest) -> Message:
        if request.service not in ("", HEALTH_SERVICE):
            raise NotFound(f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)

    async def _watch(self, request: health_pb2.HealthCheckRequest) -> AsyncIterator[Message]:
        """SERVING, then held open until the plugin ends the streams at shutdown."""
        yield await self._check(request)
        await asyncio.get_running_loop().create_future()

    async def _controller_shutdown(self, _request: Message) -> Message:
        self.shutdown.set()
        return grpc_controller_pb2.Empty()

    async def _stdio(self, _request: Message) -> AsyncIterator[Message]:
        """Held open and silent: the plugin logs to stderr, which go-plugin reads itself.
        A host may open it again after a reattach; each call waits for the shutdown."""
        await asyncio.get_running_loop().create_future()
        return
        yield grpc_stdio_pb2.StdioData()  # pragma: no cover - makes this an async generator

    async def start(self) -> None:
        if self._server.add_insecure_port(f"unix:{self.socket_path}") == 0:
            raise Unavailable(f"cannot listen on {self.socket_path}")
        await self._server.start()

    async def wait_and_stop(self, grace: float = 0.5) -> None:
        """Once ``shutdown`` is set: end the streams, then stop; unary calls in flight
        (WaitTask holds one per task) have ``grace`` seconds before grpc cancels them."""
        await self.shutdown.wait()
        self._live.end_all()
        with contextlib.suppress(asyncio.CancelledError):
            await self._server.stop(grace)

    async def settle(self, bound: float = 1.0) -> None:
        """Wait, at most ``bound`` seconds, for the loop's other tasks: grpc.aio's
        per-call tasks end only once core has reported each call closed, after
        ``stop`` returned. The owner ends its own tasks first."""
        me = asyncio.current_task()
        others = {t for t in asyncio.all_tasks() if t is not me}
        if others:
            await asyncio.wait(others, timeout=bound)
