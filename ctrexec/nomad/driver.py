"""The Driver and BasePlugin services Nomad's client calls, on ctrexec's Executor.

The Executor is synchronous; its short calls run on a small thread pool. What lasts a
task's life holds no thread: WaitTask awaits a shared future that containerd's armed
Wait resolves (:mod:`ctrexec.nomad.waits`), TaskStats sleeps on the event loop
between samples, Fingerprint and TaskEvents await queues. So a node with hundreds of
tasks (each holding a WaitTask and a TaskStats call open) needs no thread for them.

No containerd work is done before SetConfig with a Nomad config (the long-lived
instance): Nomad starts and kills the plugin to probe it and to validate its config.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from ctrexec import (
    CtrexecError,
    DeadlineExceeded,
    ExitStatus,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Status,
    Unavailable,
    __version__,
    nomad_task_id,
    to_timestamp,
)
from ctrexec._api.nomad.base import base_pb2 as bpb
from ctrexec._api.nomad.drivers import driver_pb2 as pb
from ctrexec._api.nomad.structs import attribute_pb2, recoverable_error_pb2
from ctrexec.nomad import hclspec
from ctrexec.nomad.config import PLUGIN_SCHEMA, TASK_SCHEMA, PluginConfig
from ctrexec.nomad.stats import Compute, StatsSampler
from ctrexec.nomad.taskmap import (
    DriverState,
    alloc_addresses,
    container_id,
    owner_labels,
    pull_options,
    to_task_config,
)
from ctrexec.nomad.waits import ExitWaiters

if TYPE_CHECKING:
    from ctrexec import Executor, Process, TaskConfig

T = TypeVar("T")
P = ParamSpec("P")
log = logging.getLogger("ctrexec.nomad")

PLUGIN_NAME = "ctrexec"
API_VERSION = "v0.1.0"
FINGERPRINT_PERIOD = 30.0
_RUNTIMES = ("runc", "crun", "runsc", "kata-runtime")


def recoverable_detail(exc: CtrexecError) -> recoverable_error_pb2.RecoverableError | None:
    """Errors a retry can fix (containerd away, a deadline) are marked for Nomad's
    restart policy; a bad config or a missing image is not."""
    if isinstance(exc, Unavailable | DeadlineExceeded):
        return recoverable_error_pb2.RecoverableError(recoverable=True)
    return None


def _ensure_image(executor: Executor, config: TaskConfig, options: dict[str, Any]) -> None:
    """The task's image in this namespace: adopted from another, or pulled."""
    # The registry client (urllib3) loads with the first StartTask, not at plugin start.
    from ctrexec import ensure_pulled

    ensure_pulled(
        executor.client, config.image, platform=config.platform,
        snapshotter=config.snapshotter, cache=executor.images,
        **options,
    )  # fmt: skip


async def _until_exit(
    proc: Process,
    queue: asyncio.Queue[pb.ExecTaskStreamingResponse],
    loop: asyncio.AbstractEventLoop,
) -> AsyncIterator[pb.ExecTaskStreamingResponse]:
    """The queued output until the process has exited and all of it is out.

    The pumps hand their last bytes to the loop before the exit byte is written, so
    once ``exit_fd`` is readable the queue already holds everything.
    """
    exited = asyncio.Event()
    loop.add_reader(proc.exit_fd, exited.set)
    try:
        while not (exited.is_set() and queue.empty()):
            getter = asyncio.ensure_future(queue.get())
            ended = asyncio.ensure_future(exited.wait())
            try:
                await asyncio.wait({getter, ended}, return_when=asyncio.FIRST_COMPLETED)
            finally:  # also when the call is cancelled: no task outlives it
                ended.cancel()
                got = getter.done()
                if not got:
                    getter.cancel()
            if got:
                yield getter.result()
    finally:
        loop.remove_reader(proc.exit_fd)


def exit_result(status: ExitStatus) -> pb.ExitResult:
    return pb.ExitResult(
        exit_code=status.exit_code, signal=status.signal or 0, oom_killed=status.oom_killed
    )


class NomadDriver:
    """One plugin process's driver: its config, its executor and its live tasks."""

    def __init__(self) -> None:
        self.plugin: PluginConfig | None = None
        #: the node's CPU from SetConfig's NomadConfig: TaskStats' total_ticks
        self.compute = Compute()
        self._executor: Executor | None = None
        self._waits: ExitWaiters | None = None
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="ctrexec-nomad")
        #: Nomad task id -> (containerd id, the TaskConfig Nomad sent, started at)
        self._tasks: dict[str, tuple[str, pb.TaskConfig, datetime]] = {}
        self._event_queues: set[asyncio.Queue[pb.DriverTaskEvent]] = set()
        #: containerd ids of StartTasks in flight: not dangling, whatever their age
        self._starting: set[str] = set()
        self._reconciler: asyncio.Future[None] | None = None
        self._health_changed = asyncio.Event()

    # -- plumbing ----------------------------------------------------------------

    async def _run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: fn(*args, **kwargs))

    def _ready(self) -> Executor:
        if self._executor is None:
            raise Unavailable("the driver has no containerd connection yet (SetConfig first)")
        return self._executor

    def _emit(self, task: pb.TaskConfig, message: str, **annotations: str) -> None:
        event = pb.DriverTaskEvent(
            task_id=task.id,
            alloc_id=task.alloc_id,
            task_name=task.name,
            timestamp=to_timestamp(datetime.now(UTC)),
            message=message,
            annotations=annotations,
        )
        for q in self._event_queues:
            q.put_nowait(event)

    def _known(self, task_id: str) -> tuple[str, pb.TaskConfig, datetime]:
        entry = self._tasks.get(task_id)
        if entry is None:
            raise NotFound(f"task {task_id} not found")
        return entry

    def methods(self) -> dict[str, dict[str, Any]]:
        """Service name -> method name -> implementation, for the server seam."""
        return {
            "BasePlugin": {
                "PluginInfo": self.plugin_info,
                "ConfigSchema": self.config_schema,
                "SetConfig": self.set_config,
            },
            "Driver": {
                "Init": self.init,
                "Shutdown": self.driver_shutdown,
                "TaskConfigSchema": self.task_config_schema,
                "Capabilities": self.capabilities,
                "Fingerprint": self.fingerprint,
                "TaskEvents": self.task_events,
                "StartTask": self.start_task,
                "WaitTask": self.wait_task,
                "StopTask": self.stop_task,
                "DestroyTask": self.destroy_task,
                "InspectTask": self.inspect_task,
                "SignalTask": self.signal_task,
                "ExecTask": self.exec_task,
                "ExecTaskStreaming": self.exec_task_streaming,
                "TaskStats": self.task_stats,
                "RecoverTask": self.recover_task,
            },
        }

    # -- BasePlugin ------------------------------------------------------------------

    async def plugin_info(self, _req: bpb.PluginInfoRequest) -> bpb.PluginInfoResponse:
        return bpb.PluginInfoResponse(
            type=bpb.DRIVER,
            plugin_api_versions=[API_VERSION],
            plugin_version=__version__,
            name=PLUGIN_NAME,
        )

    async def config_schema(self, _req: bpb.ConfigSchemaRequest) -> bpb.ConfigSchemaResponse:
        return bpb.ConfigSchemaResponse(spec=hclspec.to_proto(PLUGIN_SCHEMA))

    async def set_config(self, req: bpb.SetConfigRequest) -> bpb.SetConfigResponse:
        """Validate; connect only for the long-lived instance (the one given a
        NomadConfig): validation runs start, SetConfig twice, and a kill."""
        config = PluginConfig.from_decoded(hclspec.decode(PLUGIN_SCHEMA, req.msgpack_config))
        self.plugin = config
        if req.HasField("nomad_config") and req.nomad_config.driver.HasField("Topology"):
            self.compute = Compute.from_topology(req.nomad_config.driver.Topology)
        if req.HasField("nomad_config") and self._executor is None:
            await self._run(self._connect, config, asyncio.get_running_loop())
        self._start_reconciler()
        return bpb.SetConfigResponse()

    def _start_reconciler(self) -> None:
        """Once connected: the dangling-container sweeps, unless the config says not."""
        if self._reconciler is not None or self._executor is None or self.plugin is None:
            return
        if not self.plugin.dangling.enabled:
            return
        # A plugin whose config turns the sweeps off never loads the reconciler.
        from ctrexec.nomad.dangling import Reconciler

        def claimed() -> set[str]:
            return {entry[0] for entry in list(self._tasks.values())} | set(self._starting)

        rec = Reconciler(self._executor, self.plugin.dangling, claimed, self._run)
        self._reconciler = asyncio.ensure_future(rec.run())

    def _connect(self, config: PluginConfig, loop: asyncio.AbstractEventLoop) -> None:
        # containerd's stubs and the executor load at SetConfig, after the handshake and
        # the schema calls Nomad makes of every plugin it fingerprints.
        from ctrexec import Client, Executor

        client = Client.connect(config.address, namespace=config.namespace)
        self._executor = Executor(client)
        self._waits = ExitWaiters(self._executor, loop)

    # -- Driver: set-up ------------------------------------------------------------------

    async def init(self, _req: pb.InitRequest) -> pb.InitResponse:
        """Idempotent: called after every launch and every reattach (Nomad 2.0.4+)."""
        if self.plugin is not None and self._executor is None:
            await self._run(self._connect, self.plugin, asyncio.get_running_loop())
        self._start_reconciler()
        return pb.InitResponse()

    async def close(self) -> None:
        """At plugin shutdown: end the reconciler (a task of its own on the loop)."""
        rec, self._reconciler = self._reconciler, None
        if rec is not None:
            rec.cancel()
            await asyncio.wait({rec})
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def driver_shutdown(self, _req: pb.ShutdownRequest) -> pb.ShutdownResponse:
        """Tasks outlive the plugin (the shim owns them); nothing to stop here."""
        return pb.ShutdownResponse()

    async def task_config_schema(
        self, _req: pb.TaskConfigSchemaRequest
    ) -> pb.TaskConfigSchemaResponse:
        return pb.TaskConfigSchemaResponse(spec=hclspec.to_proto(TASK_SCHEMA))

    async def capabilities(self, _req: pb.CapabilitiesRequest) -> pb.CapabilitiesResponse:
        return pb.CapabilitiesResponse(
            capabilities=pb.DriverCapabilities(
                send_signals=True,
                exec=True,
                fs_isolation=pb.DriverCapabilities.IMAGE,
                network_isolation_modes=[
                    pb.NetworkIsolationSpec.HOST,
                    pb.NetworkIsolationSpec.GROUP,
                ],
                must_create_network=False,
                mount_configs=pb.DriverCapabilities.ANY_MOUNTS,
            )
        )

    def _fingerprint_now(self) -> pb.FingerprintResponse:
        def attr(text: str) -> attribute_pb2.Attribute:
            return attribute_pb2.Attribute(string_val=text)

        attrs = {f"driver.{PLUGIN_NAME}.version": attr(__version__)}
        found = [r for r in _RUNTIMES if shutil.which(r)]
        attrs[f"driver.{PLUGIN_NAME}.runtimes"] = attr(",".join(found))
        if self._executor is None:
            return pb.FingerprintResponse(
                attributes=attrs,
                health=pb.FingerprintResponse.UNDETECTED,
                health_description="not configured",
            )
        try:
            version = self._executor.client.version(timeout=5.0)
        except CtrexecError as exc:
            return pb.FingerprintResponse(
                attributes=attrs,
                health=pb.FingerprintResponse.UNHEALTHY,
                health_description=f"containerd: {exc}",
            )
        attrs[f"driver.{PLUGIN_NAME}.containerd.version"] = attr(version.version)
        attrs[f"driver.{PLUGIN_NAME}.containerd.namespace"] = attr(self._executor.client.namespace)
        return pb.FingerprintResponse(
            attributes=attrs, health=pb.FingerprintResponse.HEALTHY, health_description="Healthy"
        )

    async def fingerprint(
        self, _req: pb.FingerprintRequest
    ) -> AsyncIterator[pb.FingerprintResponse]:
        """At once, then every period; never ends (Nomad calls again in a hot loop)."""
        while True:
            yield await self._run(self._fingerprint_now)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._health_changed.wait(), FINGERPRINT_PERIOD)
            self._health_changed.clear()

    async def task_events(self, _req: pb.TaskEventsRequest) -> AsyncIterator[pb.DriverTaskEvent]:
        queue: asyncio.Queue[pb.DriverTaskEvent] = asyncio.Queue()
        self._event_queues.add(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            self._event_queues.discard(queue)

    # -- Driver: tasks ----------------------------------------------------------------------

    async def start_task(self, req: pb.StartTaskRequest) -> pb.StartTaskResponse:
        task = req.task
        if task.id in self._tasks:
            raise FailedPrecondition(f"task {task.id} is already started")
        plugin = self.plugin
        if plugin is None:
            raise Unavailable("the driver is not configured yet (SetConfig first)")
        opts = hclspec.decode(TASK_SCHEMA, task.msgpack_driver_config)
        config = to_task_config(task, opts, plugin)
        executor = self._ready()
        self._starting.add(config.name)
        try:
            pull = await self._run(pull_options, opts, plugin)
            await self._run(_ensure_image, executor, config, pull)
            addresses = await self._run(alloc_addresses, task)
            labels = owner_labels(task, addresses)
            handle = await self._run(executor.start_task, config, owner_labels=labels)
        finally:
            self._starting.discard(config.name)
        self._tasks[task.id] = (handle.id, task, handle.started_at)
        self._emit(task, f"Started container {handle.id}", container_id=handle.id)
        state = DriverState(
            container_id=handle.id,
            namespace=executor.client.namespace,
            started_at=handle.started_at,
        )
        log.info("started task", extra={"task_id": task.id, "container_id": handle.id})
        return pb.StartTaskResponse(
            result=pb.StartTaskResponse.SUCCESS,
            handle=pb.TaskHandle(
                version=1, config=task, state=pb.RUNNING, driver_state=state.encode()
            ),
        )

    async def wait_task(self, req: pb.WaitTaskRequest) -> pb.WaitTaskResponse:
        """Long-lived; any number at once. A cancelled call (the agent going away)
        just ends here; the exit is still delivered to the others and to later calls."""
        cid, task, _started = self._known(req.task_id)
        waits = self._waits
        if waits is None:
            raise Unavailable("the driver has no containerd connection")
        status = await waits.wait(cid)
        status = (await self._run(self._ready().with_oom, {cid: status}))[cid]
        if status.oom_killed:
            self._emit(task, "OOM Killed", oom_killed="true")
        return pb.WaitTaskResponse(result=exit_result(status))

    async def stop_task(self, req: pb.StopTaskRequest) -> pb.StopTaskResponse:
        """Signal, then SIGKILL after the timeout; the task's state stays for WaitTask."""
        cid, _task, _started = self._known(req.task_id)
        timeout = req.timeout.ToTimedelta().total_seconds() if req.HasField("timeout") else None
        await self._run(self._ready().stop, cid, timeout, req.signal or None)
        return pb.StopTaskResponse()

    async def destroy_task(self, req: pb.DestroyTaskRequest) -> pb.DestroyTaskResponse:
        """Fine for an unknown id (Nomad cleans up after failed recoveries with it)."""
        entry = self._tasks.get(req.task_id)
        cid = entry[0] if entry else container_id(req.task_id)
        executor = self._ready()
        if not req.force:
            state = await self._run(executor.inspect, cid) if entry else None
            if state is not None and state.status in (Status.RUNNING, Status.PAUSED):
                raise FailedPrecondition(f"task {req.task_id} is running; stop it or force")
            if state is not None and state.status is Status.UNKNOWN:  # its shim is silent
                raise FailedPrecondition(
                    f"task {req.task_id}'s state is unknown ({state.unknown_reason}); "
                    "it may run: stop it or force"
                )
        with contextlib.suppress(NotFound):
            await self._run(executor.destroy, cid, force=True)
        if self._waits is not None:
            self._waits.forget(cid)
        self._tasks.pop(req.task_id, None)
        return pb.DestroyTaskResponse()

    async def inspect_task(self, req: pb.InspectTaskRequest) -> pb.InspectTaskResponse:
        cid, task, started = self._known(req.task_id)
        info = await self._run(self._ready().inspect, cid)
        running = info.status in (Status.RUNNING, Status.PAUSED)
        exited = info.exit if not running else None
        state = pb.RUNNING if running else (pb.EXITED if exited else pb.UNKNOWN)
        return pb.InspectTaskResponse(
            task=pb.TaskStatus(
                id=task.id,
                name=task.name,
                state=state,
                started_at=to_timestamp(started),
                completed_at=to_timestamp(exited.exited_at if exited else None),
                result=exit_result(exited) if exited else pb.ExitResult(),
            ),
            driver=pb.TaskDriverStatus(
                attributes={"container_id": cid, "pid": str(info.pid), "image": info.image}
            ),
        )

    async def signal_task(self, req: pb.SignalTaskRequest) -> pb.SignalTaskResponse:
        cid, _task, _started = self._known(req.task_id)
        if not req.signal:
            raise InvalidArgument("SignalTask needs a signal")
        await self._run(self._ready().signal, cid, req.signal)
        return pb.SignalTaskResponse()

    async def exec_task(self, req: pb.ExecTaskRequest) -> pb.ExecTaskResponse:
        """A command in the task, its output captured (Nomad's script checks use it)."""
        cid, _task, _started = self._known(req.task_id)
        if not req.command:
            raise InvalidArgument("ExecTask needs a command")
        limit = req.timeout.ToTimedelta().total_seconds() if req.HasField("timeout") else 0
        result = await self._run(
            self._ready().exec, cid, list(req.command), timeout=limit if limit > 0 else None
        )
        return pb.ExecTaskResponse(
            stdout=result.stdout,
            stderr=result.stderr,
            result=pb.ExitResult(exit_code=result.exit_code),
        )

    async def exec_task_streaming(
        self, requests: AsyncIterator[pb.ExecTaskStreamingRequest]
    ) -> AsyncIterator[pb.ExecTaskStreamingResponse]:
        """``nomad alloc exec``: stdin, terminal size and close in; output, then the exit,
        out. Output arrives by callbacks from the process's pump threads, the exit by its
        ``exit_fd`` on this event loop: no thread waits for the process."""
        first = await anext(aiter(requests), None)
        if first is None or not first.HasField("setup") or not first.setup.command:
            raise InvalidArgument("ExecTaskStreaming starts with a setup holding a command")
        cid, _task, _started = self._known(first.setup.task_id)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[pb.ExecTaskStreamingResponse] = asyncio.Queue()

        def to(stream: str) -> Callable[[bytes], None]:
            def deliver(data: bytes) -> None:
                op = pb.ExecTaskStreamingIOOperation(data=data)
                reply = (
                    pb.ExecTaskStreamingResponse(stdout=op)
                    if stream == "stdout"
                    else pb.ExecTaskStreamingResponse(stderr=op)
                )
                loop.call_soon_threadsafe(queue.put_nowait, reply)

            return deliver

        size = first.tty_size
        proc = await self._run(
            self._ready().exec_stream, cid, list(first.setup.command), tty=first.setup.tty,
            stdin=True, size=(size.width, size.height) if first.HasField("tty_size") else None,
            on_stdout=to("stdout"), on_stderr=to("stderr"),
        )  # fmt: skip
        feeder = asyncio.ensure_future(self._feed_exec(proc, requests))
        try:
            async for reply in _until_exit(proc, queue, loop):
                yield reply
            status = proc.wait(0)
        finally:
            feeder.cancel()
            await self._run(proc.close)
        yield pb.ExecTaskStreamingResponse(exited=True, result=exit_result(status))

    async def _feed_exec(
        self, proc: Process, requests: AsyncIterator[pb.ExecTaskStreamingRequest]
    ) -> None:
        async for req in requests:
            if req.HasField("tty_size"):
                await self._run(proc.resize, req.tty_size.width, req.tty_size.height)
            if req.HasField("stdin"):
                if req.stdin.data:
                    await self._run(proc.write, req.stdin.data)
                if req.stdin.close:
                    await self._run(proc.close_stdin)

    async def task_stats(self, req: pb.TaskStatsRequest) -> AsyncIterator[pb.TaskStatsResponse]:
        """A sample every interval until the call is cancelled or the task ends."""
        cid, task, _started = self._known(req.task_id)
        interval = req.collection_interval.ToTimedelta().total_seconds()
        if interval <= 0:
            interval = self.plugin.stats_interval if self.plugin else 1.0
        sampler = StatsSampler(task.id, self.compute)
        executor = self._ready()
        while req.task_id in self._tasks:
            try:
                sample = await self._run(executor.stats, cid)
            except NotFound:
                return  # the task ended: Nomad's stats hook stops or opens a new one
            yield pb.TaskStatsResponse(stats=sampler.convert(sample))
            await asyncio.sleep(interval)

    async def recover_task(self, req: pb.RecoverTaskRequest) -> pb.RecoverTaskResponse:
        """From ``handle.driver_state`` plus containerd; ``task_id`` arrives empty."""
        task = req.handle.config
        if not task.id:
            raise InvalidArgument("RecoverTask needs handle.config with the task id")
        if task.id in self._tasks:
            return pb.RecoverTaskResponse()
        executor = self._ready()
        state = DriverState.decode(req.handle.driver_state)
        if state.namespace != executor.client.namespace:
            raise InvalidArgument(
                f"task {task.id} is in containerd namespace {state.namespace},"
                f" this plugin uses {executor.client.namespace}"
            )
        info = await self._run(executor.inspect, state.container_id)
        if nomad_task_id(info.labels) != task.id:
            raise NotFound(f"container {state.container_id} is not task {task.id}")
        self._tasks[task.id] = (state.container_id, task, state.started_at)
        log.info("recovered task", extra={"task_id": task.id, "status": info.status.value})
        return pb.RecoverTaskResponse()
