"""The scheduler-facing API: TaskConfig in, TaskHandle out, and the verbs on it.

Every verb maps to one of Nomad's task-driver calls (start, wait, stop, destroy,
inspect, signal, exec, stats, recover). State lives only in containerd: labels and
the TaskConfig extension on the container record, plus the task itself, so any
number of Executor instances, in any number of processes, agree on what exists.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from ctrexec import _linux, defaults, owners
from ctrexec import labels as lbl
from ctrexec.containerd import containers, images, snapshots, stats, tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.streams import Process, StreamOptions
from ctrexec.containerd.tasks import ExitStatus, Status, Stdio
from ctrexec.errors import (
    AlreadyExists,
    AlreadyRunning,
    CtrexecError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from ctrexec.logs import client as logdaemon_client
from ctrexec.logs import modes as logmodes
from ctrexec.net import hostfiles, netns
from ctrexec.oci.mounts import Mount
from ctrexec.oci.user import ResolvedUser
from ctrexec.tasks import control as taskctl
from ctrexec.tasks import execing, grouplock, hostside, retiring, runs, waiting
from ctrexec.tasks import files as taskfiles
from ctrexec.tasks import info as taskinfo
from ctrexec.tasks import output as taskoutput
from ctrexec.tasks import spec as taskspec
from ctrexec.tasks import stdio as taskio
from ctrexec.tasks import volumes as volstore
from ctrexec.tasks.config import TaskConfig, config_of
from ctrexec.tasks.reports import TaskHandle, TaskInfo
from ctrexec.tasks.users import ImageUsers

if TYPE_CHECKING:
    from ctrexec.paths import StrPath
    from ctrexec.tasks.events import EventOptions, TaskEvents
    from ctrexec.tasks.publishing import NetworkRequest

DEFAULT_LOG_DIR = Path(defaults.DEFAULT_LOG_DIR)

#: What a start by hand clears: the supervisor's state for the previous run.
_SUPERVISOR_MARKS = (
    lbl.STOPPED_BY_USER,
    lbl.RESTART_COUNT,
    lbl.RESTART_BACKOFF,
    lbl.RESTART_STARTED_AT,
    lbl.RESTART_PENDING,
    lbl.RESTART_ERROR,
    lbl.RESTART_DUE,
)


class Executor(hostside.HostSide, execing.Execs, taskctl.Removing, retiring.Retiring):
    """Runs tasks in one containerd namespace. Thread-safe: it holds no mutable state
    besides per-container locks that serialise start/stop/destroy of the same task,
    and caches of what digests fix (image documents, resolved users)."""

    def __init__(
        self,
        client: Client,
        *,
        log_dir: StrPath = DEFAULT_LOG_DIR,
        files_dir: StrPath | None = None,
        state_dir: StrPath | None = None,
    ) -> None:
        """``log_dir``: task logs (a TaskConfig's ``log_dir`` wins). ``state_dir``: the
        rest of ctrexec's own files (the tasks' hosts files unless ``files_dir``
        says, the log driver's launcher), instead of under /run/ctrexec."""
        self.client = client
        self.log_dir = Path(log_dir)
        self.state_dir = None if state_dir is None else Path(state_dir)
        if files_dir is None:
            files_dir = (
                hostfiles.DEFAULT_DIR if state_dir is None else Path(state_dir) / "netns-files"
            )
        self.files_dir = Path(files_dir)
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        #: Image documents and unpack state by digest; shared by every start.
        self.images = images.ImageCache()
        #: Users resolved through each image's passwd and group files.
        self.users = ImageUsers()

    # -- create -------------------------------------------------------------------

    def create(
        self,
        config: TaskConfig,
        *,
        owner_labels: Mapping[str, str] | None = None,
        network: NetworkRequest | None = None,
    ) -> containers.Container:
        """Create the container record and its rootfs snapshot; do not run anything.

        All checks run first; a failure after the first side effect undoes it.
        ``owner_labels`` are ctrexec's own keys set by a caller such as groups (user
        labels may not use that prefix); they land in the same Create call.
        ``network``: a namespace of its own, made first (``run -p``; NetworkRequest).
        """
        with self._networked(config, owner_labels, network) as (joined, labels):
            return self._create(joined, labels)[0]

    def _networked(
        self, config: TaskConfig, labels: Mapping[str, str] | None, network: NetworkRequest | None
    ) -> contextlib.AbstractContextManager[tuple[TaskConfig, Mapping[str, str]]]:
        """The config and labels joined to ``network``, released if the block fails."""
        if network is None:
            return contextlib.nullcontext((config, labels or {}))
        from ctrexec.tasks import publishing  # start-up: only then load CNI's side

        return publishing.joined(self.client, self.files_dir, config, network, labels or {})

    def _create(
        self, config: TaskConfig, owner_labels: Mapping[str, str], *, first_run: bool = False
    ) -> tuple[containers.Container, list[snapshots.RootfsMount]]:
        """The record and its rootfs mounts (which start_task passes on to the task).

        ``first_run``: the record is made to start at once, so it is labelled as its
        first run (:func:`runs.first_run`): no label update after the start.
        """
        checked = taskspec.check_config(config, containerd_address=self.client.address)
        if config.group and config.netns not in ("host", "none", ""):
            # Start-up: only a create into a group checks its pin (see groupnet).
            from ctrexec.tasks import groupnet

            groupnet.before_create(self.client, config.group, netns.resolve(config.netns))
        netns_path, mode = self._resolve_netns(config.netns)
        # Start-up: ps, inspect and logs build an Executor too, and never create.
        from ctrexec.images import lookup

        image = lookup.ensure_image(
            self.client,
            config.image,
            platform=config.platform,
            snapshotter=config.snapshotter,
            cache=self.images,
        )
        user = self._resolve_user(image, config.user or image.config.user, config)
        log_root = Path(config.log_dir) if config.log_dir else self.log_dir
        log_path = taskfiles.log_path(log_root, self.client.namespace, config.name)
        # The spec needs only the files' paths; they are written once the record exists
        # (here, or by start()), so a crash in between leaves no orphan files behind.
        files = taskfiles.for_task(self.files_dir, self.client.namespace, config)
        bound = self._bind_volumes(checked)
        if bound is not None:
            checked, owner_labels = bound.checked, {**owner_labels, **bound.labels}
        spec = taskspec.build(
            checked,
            image=image.config,
            user=user,
            netns_path=netns_path,
            host_network=mode == "host",
            hostfiles=files,
            namespace=self.client.namespace,
            containerd_address=self.client.address,
        )
        if first_run:  # as late as can be: the run's start time
            owner_labels = {**owner_labels, **runs.first_run(datetime.now(UTC))}
        record_labels = taskspec.record_labels(
            checked,
            image_config=image.config,
            image_id=image.config_digest,
            mode=mode,
            netns_path=netns_path,
            files=files,
            log_path=log_path,
            owner_labels=owner_labels,
        )
        record, mounts = self._record(checked, image, spec, record_labels, bound)
        taskfiles.write(record.id, record.labels, config, replace=True)
        return record, mounts

    def _bind_volumes(self, checked: taskspec.CheckedConfig) -> volstore.Bound | None:
        """The config's volumes made (named ones if missing) and bound, if it has any."""
        if all(isinstance(m, Mount) for m in checked.volumes):
            return None
        return volstore.bind_volumes(checked, self.client.namespace)

    def _record(
        self,
        checked: taskspec.CheckedConfig,
        image: images.Image,
        spec: dict[str, Any],
        record_labels: Mapping[str, str],
        bound: volstore.Bound | None,
    ) -> tuple[containers.Container, list[snapshots.RootfsMount]]:
        """The record, and the image's files in its new empty volumes. The anonymous
        volumes made for a record that was not made go (named ones stay, as docker's
        ``-v NAME:`` made them)."""
        # Start-up: ps, inspect and logs build an Executor too, and never create.
        from ctrexec.tasks import records

        # Its owner first: its host files, log and cgroup, made after it, are judged by it.
        owner = owners.Owner(self.client.address, self.client.namespace, checked.config.name)
        try:
            with owners.recording(self.state_dir, owner):
                record, mounts = records.create(
                    self.client, checked, image, spec=spec, record_labels=record_labels,
                    cache=self.images)  # fmt: skip
        except BaseException:
            if bound is not None:
                volstore.remove_anonymous(self.client.namespace, bound.labels)
            raise
        if bound is not None and bound.fill:
            self._populate(record.id, bound.fill)
        return record, mounts

    def _populate(self, task_id: str, fill: Sequence[tuple[str, Path]]) -> None:
        """The image's files into the new container's empty volumes; if that fails,
        the container goes (with its anonymous volumes), as if never created."""
        try:
            volstore.populate(self.client, self.images, task_id, fill)
        except BaseException:
            with contextlib.suppress(CtrexecError):
                self.destroy(task_id, force=True, volumes=True)
            raise

    def _resolve_netns(self, value: str) -> tuple[str | None, str]:
        if value == "host":
            return None, "host"
        if value in ("none", ""):
            return None, "none"
        path = netns.resolve(value)
        netns.verify(path)
        return path, "path"

    def _resolve_user(self, image: images.Image, user: str, config: TaskConfig) -> ResolvedUser:
        """``user`` in the image, with the config's added groups (``--group-add``)."""
        return self.users.resolve(self.client, image, user, config.snapshotter, config.group_add)

    # -- start ----------------------------------------------------------------------

    def start(self, task_id: str, *, by_policy: bool = False) -> TaskHandle:
        """Start (or start again) the task of an existing container.

        A start by hand clears the "stopped by user" mark, the restart count and the
        backoff, as docker does; the supervisor passes ``by_policy=True`` to keep them.
        A group member's namespace is made whole first (:mod:`ctrexec.tasks.groupnet`).
        """
        return self._start(task_id, by_policy=by_policy)

    def start_watched(
        self,
        task: TaskConfig | str,
        *,
        owner_labels: Mapping[str, str] | None = None,
        network: NetworkRequest | None = None,
    ) -> tuple[TaskHandle, Future[ExitStatus]]:
        """:meth:`start_task` (given a config) or :meth:`start` (a container's id), and
        the future of this run's exit, armed between the task's create and its start.

        A :meth:`wait` begun after a start may find no task: the supervisor deletes an
        ``auto_remove`` task as it exits, and its exit goes with it (``run --rm`` of a
        quick command). This one can't miss it. Cancel the future to stop waiting.
        """
        watch: list[Future[ExitStatus]] = []
        try:
            if isinstance(task, str):
                handle = self._start(task, by_policy=False, watch=watch)
            else:
                handle = self._start_task(task, owner_labels, network, watch)
        except BaseException:
            for future in watch:  # armed, then the start failed
                future.cancel()
            raise
        return handle, watch[0]

    def _start(
        self, task_id: str, *, by_policy: bool, watch: list[Future[ExitStatus]] | None = None
    ) -> TaskHandle:
        # A member's start is an act on its group (grouplock): its lock, then the task's.
        with grouplock.of_task(self.client, task_id), self._lock(task_id):
            # Start-up: what only a start needs loads with the first start, not for ps.
            from ctrexec.tasks import groupnet, records

            # Its group's namespace pinned or made again first (a start of a running member
            # repairs a lost pin too); read again under the locks, as another act may have
            # changed it while this one waited.
            current = containers.get(self.client, task_id)
            groupnet.ensure(self.client, current, self.files_dir)
            if netns_path := current.labels.get(lbl.NETNS_PATH):
                # A start that can't join its namespace fails before the stopped task
                # (and the exit ps shows of it) is touched.
                netns.ensure_loopback_up(netns_path)
            before, record = self._clear_previous_run(task_id, by_policy=by_policy)
            try:
                mounts = records.rootfs_mounts(self.client, record, self.images)
                return self._launch(record, mounts, watch=watch)
            except BaseException:
                taskinfo.undo_next_run(self.client, before)
                raise

    def _launch(
        self,
        record: containers.Container,
        mounts: Sequence[snapshots.RootfsMount],
        *,
        fresh: bool = False,
        watch: list[Future[ExitStatus]] | None = None,
    ) -> TaskHandle:
        """Create and start the record's task, the run its labels number (see
        :mod:`ctrexec.tasks.runs`). ``fresh``: the record was just made, so no previous run
        can be in the way unless Tasks.Create says so. ``watch`` gets the exit's future."""
        task_id = record.id
        log_path = record.labels.get(lbl.LOG_PATH, "")
        cfg = config_of(record)
        log_token: list[str] = []  # the log daemon's registration, if one was made

        def logged(copies: Mapping[str, str] | None) -> Stdio:
            out, err, token = taskoutput.stdio_for(
                cfg, log_path, state_dir=self.state_dir, copies=copies
            )
            log_token.append(token)
            return Stdio(stdout=out, stderr=err)

        netns_path = record.labels.get(lbl.NETNS_PATH)
        if netns_path:
            # Verified again (it may have been removed since); `ip netns add` leaves lo down.
            netns.ensure_loopback_up(netns_path)
        taskfiles.write(task_id, record.labels, cfg, replace=False)  # the missing ones
        try:
            with taskio.task_stdio(record.labels, cfg, logged) as stdio:
                try:
                    pid = self._run_task(record, mounts, stdio, cfg, watch)
                except AlreadyExists:
                    if not fresh:
                        raise
                    # A shim left by an earlier container of this name (containerd#6860).
                    self._clear_previous_run(task_id, by_policy=True, next_run=False)
                    pid = self._run_task(record, mounts, stdio, cfg, watch)
        except BaseException:
            if log_token:  # the shim never opened the FIFOs: the daemon would wait for them
                taskoutput.forget(self.state_dir, token=log_token[0])
            raise
        run = runs.current(record.labels)
        return TaskHandle(
            id=task_id,
            namespace=self.client.namespace,
            address=self.client.address,
            pid=pid,
            started_at=run.started_at if run and run.started_at else datetime.now(UTC),
            netns_path=netns_path,
            log_path=log_path,
            run=run.run if run else 0,
            container_created_at=record.created_at,
        )

    def _clear_previous_run(
        self, task_id: str, *, by_policy: bool, next_run: bool = True
    ) -> tuple[containers.Container, containers.Container]:
        """Refuse a task that runs; clear what a previous run left behind (labels, the
        task in containerd). With ``next_run``, the same label update numbers the new run
        and keeps the stopped task's exit, before it is deleted: the only moment it can
        still be read. The record before and after that update."""
        before = record = containers.get(self.client, task_id)
        state = tasks.find(self.client, task_id)
        if state is not None and state.unknown:  # it may well run: no second copy
            raise FailedPrecondition(
                f"container {task_id} has a task whose state is unknown ({state.reason}); "
                "not started"
            )
        if state is not None and state.status is Status.RUNNING:
            raise AlreadyRunning(f"container {task_id} is already running")
        if state is not None and state.status not in (Status.STOPPED, Status.CREATED):
            raise FailedPrecondition(f"container {task_id} is already {state.status.value}")
        marks = [] if by_policy else [k for k in _SUPERVISOR_MARKS if k in record.labels]
        if next_run:
            record = taskinfo.next_run(self.client, record, state, clear=marks)
        elif marks:
            record = containers.update_labels(self.client, task_id, dict.fromkeys(marks))
        if state is not None and state.status is Status.CREATED:
            # A start that died between Tasks.Create and Tasks.Start: begin again.
            tasks.force_delete(self.client, task_id)
        # Also with no task: this shuts down a shim left without one (see
        # tasks.force_delete); a plain NotFound is ignored.
        tasks.delete(self.client, task_id)
        return before, record

    def _run_task(
        self,
        record: containers.Container,
        mounts: Sequence[snapshots.RootfsMount],
        stdio: Stdio,
        cfg: TaskConfig | None,
        watch: list[Future[ExitStatus]] | None,
    ) -> int:
        """Create and start the task; its pid. A failed start leaves no task behind; what
        a create cut short by a killed ctrexec left in the way is cleared (:mod:`stale`).
        A config's v1 ``cpuset_cgroup`` is joined between the two, and ``watch``'s Wait
        armed; otherwise wait() arms its own (containerd keeps a stopped task's exit until
        it is deleted)."""
        task_id, rootfs = record.id, [m.to_proto() for m in mounts]
        from ctrexec.tasks import stale  # start-up: only a start clears a killed create

        try:
            created = stale.create_task(
                self.client,
                record,
                lambda: tasks.create(self.client, task_id, rootfs=rootfs, stdio=stdio),
            )
        except AlreadyExists:
            raise
        except CtrexecError as exc:
            raise tasks.command_error(exc) from exc
        try:
            if cfg is not None and cfg.cpuset_cgroup:
                _linux.join_cpuset_cgroup(cfg.cpuset_cgroup, created, cpus=cfg.cpuset_cpus)
            if watch is not None:
                watch.append(waiting.exit_future(self.client, task_id))
            return tasks.start(self.client, task_id)
        except CtrexecError as exc:
            tasks.force_delete(self.client, task_id)
            raise tasks.command_error(exc) from exc

    def start_task(
        self,
        config: TaskConfig,
        *,
        owner_labels: Mapping[str, str] | None = None,
        network: NetworkRequest | None = None,
    ) -> TaskHandle:
        """Create and start; a start that fails removes what create made (``network``'s
        too). The new record and its mounts go straight to the task: no previous run to
        clear. ``owner_labels`` and ``network`` as for :meth:`create`."""
        return self._start_task(config, owner_labels, network)

    def _start_task(
        self,
        config: TaskConfig,
        owner_labels: Mapping[str, str] | None,
        network: NetworkRequest | None,
        watch: list[Future[ExitStatus]] | None = None,
    ) -> TaskHandle:
        with self._networked(config, owner_labels, network) as (joined, labels):
            record, mounts = self._create(joined, labels, first_run=True)
            with self._removed_on_failure(config.name), self._lock(config.name):
                return self._launch(record, mounts, fresh=True, watch=watch)

    @contextlib.contextmanager
    def _removed_on_failure(self, task_id: str) -> Iterator[None]:
        """A container made for a start that fails goes again, as if never made."""
        try:
            yield
        except BaseException:
            with contextlib.suppress(CtrexecError):
                self.destroy(task_id, force=True)
            raise

    def start_attached(
        self, task: TaskConfig | str, *, stdin: bool = True, **streams: Unpack[StreamOptions]
    ) -> tuple[TaskHandle, Process]:
        """Start an interactive task (create it first, given a config), attached from
        its first byte (``run -it``, ``start -ai``); see :mod:`ctrexec.tasks.stdio`."""
        if isinstance(task, str):
            return taskio.start_attached(self.client, task, self.start, stdin=stdin, **streams)
        if not taskoutput.is_interactive(task):
            raise InvalidArgument("start_attached needs a config with tty or stdin_open")
        self.create(task)
        with self._removed_on_failure(task.name):
            return taskio.start_attached(self.client, task.name, self.start, stdin=stdin, **streams)

    def attach(
        self, task_id: str, *, stdin: bool = True, **streams: Unpack[StreamOptions]
    ) -> Process:
        """Stream the stdio of a running task started interactive (see
        :mod:`ctrexec.tasks.stdio`)."""
        return taskio.attach(self.client, task_id, stdin=stdin, **streams)

    # -- observe ----------------------------------------------------------------------

    def reap(self, task_id: str) -> None:
        """Delete a stopped task but keep its record (and with it the exit status is gone).
        The shim holds a task's pipes until its task is deleted, so only then does a log
        driver see the end of its streams; the shim waits for the driver, and the log
        daemon is waited for here: the log is whole once this returns (``run --rm``)."""
        with self._lock(task_id):
            state = tasks.find(self.client, task_id)
            if state is None:
                return
            if state.status is not Status.STOPPED:
                raise FailedPrecondition(f"container {task_id} is {state.status.value}")
            tasks.delete(self.client, task_id)
            record = containers.get(self.client, task_id)
            if taskoutput.uses_daemon(config_of(record)):
                with contextlib.suppress(CtrexecError):  # a kept stdout: read what is there
                    logdaemon_client.wait_drained(
                        record.labels.get(lbl.LOG_PATH, ""),
                        where=logmodes.daemon_dir(self.state_dir),
                    )

    def wait(
        self, task_id: str, timeout: float | None = None, *, until_started: bool = False
    ) -> ExitStatus:
        """Block until the task exits (DeadlineExceeded after ``timeout``, the task untouched;
        any number of threads at once; :mod:`ctrexec.tasks.waiting`); then the log is whole
        (:func:`ctrexec.tasks.output.settle`). No task: a kept exit, else NotFound, or with
        ``until_started`` docker's wait of a created one (:mod:`~ctrexec.tasks.runwait`)."""
        try:
            status = waiting.wait(self.client, task_id, timeout)
        except NotFound:  # no task: not started yet, or its run's exit kept in the record
            from ctrexec.tasks import runwait  # start-up: the event stream loads only here

            status = runwait.wait(
                self.client, task_id, timeout, state_dir=self.state_dir, until_started=until_started
            )
        taskoutput.settle(self.client, task_id, self.state_dir)
        return status

    def wait_future(self, task_id: str, *, exec_id: str = "") -> Future[ExitStatus]:
        """The exit as a future (cancel it to stop waiting); ``ctrexec.tasks.aio`` awaits it."""
        return waiting.exit_future(self.client, task_id, exec_id)

    def events(self, **options: Unpack[EventOptions]) -> TaskEvents:
        """A live stream of this namespace's task events (see
        :class:`ctrexec.tasks.events.TaskEvents`)."""
        # Imported here for start-up cost: the event stubs load only for a stream.
        from ctrexec.tasks.events import TaskEvents

        return TaskEvents.of(self.client, **options)

    def inspect(self, task_id: str, *, addresses: bool = True) -> TaskInfo:
        """The container and its latest run; ``addresses`` looks into its namespace."""
        return taskinfo.inspect(self.client, task_id, addresses=addresses, state_dir=self.state_dir)

    def tasks_in_netns(self, path: StrPath) -> list[TaskInfo]:
        """Every task, stopped ones too, that names ``path`` as its namespace."""
        path = os.fspath(path)
        return [i for i in self.list(all_tasks=True) if i.netns_path == path]

    def remove_netns(self, spec: StrPath, *, force: bool = False) -> None:
        """``netns rm``: refuse while anything uses the namespace (a task, any process, a
        mount elsewhere), naming it, unless forced: then its tasks are stopped first, and
        what is not ctrexec's keeps the namespace alive without the name."""
        path = netns.resolve(spec)
        users = self.tasks_in_netns(path)
        what = taskinfo.netns_users(path, users)
        if what and not force:
            raise FailedPrecondition(f"netns {spec} is in use by {', '.join(what)}; use --force")
        for info in users:
            if force:
                with contextlib.suppress(CtrexecError):
                    self.stop(info.id)
        netns.remove(path)

    def list(self, *, all_tasks: bool = False, addresses: bool = False) -> list[TaskInfo]:
        """Running and paused tasks (all with ``all_tasks``); ``addresses`` costs a
        netlink dump per task, so only when asked."""
        return taskinfo.list_infos(
            self.client, all_tasks=all_tasks, addresses=addresses, state_dir=self.state_dir
        )

    def rename(self, task_id: str, new_name: str) -> containers.Container:
        """Give a container whose task is not running the id ``new_name``; its snapshot,
        exit and logs go with it. The new record. NotFound, AlreadyExists when the name
        is taken, FailedPrecondition for a live task, a group member or a Nomad task."""
        from ctrexec.tasks import rename  # here, for start-up cost: only rename loads it

        return rename.rename_container(self, task_id, new_name)

    def stats(self, task_id: str) -> stats.Stats:
        data = tasks.metrics(self.client, task_id)
        if data is None:
            raise NotFound(f"no running task for container {task_id}")
        return stats.decode(data)

    def recover(self, handle: TaskHandle) -> TaskInfo:
        """Re-attach to a task from a persisted handle; report an exit that happened meanwhile.
        The task is not touched. When the container was started again since the handle's
        run, the info is about the handle's run (``superseded``, its exit if kept) and
        ``newer_run`` names the latest; see :func:`taskinfo.recover`."""
        return taskinfo.recover(self.client, handle)

    # -- act ---------------------------------------------------------------------------

    def signal(self, task_id: str, sig: int | str) -> None:
        taskctl.signal(self.client, task_id, taskspec.parse_signal(sig))

    def stop(
        self, task_id: str, timeout: float | None = None, signal: int | str | None = None,
        *, remove: bool = True,
    ) -> ExitStatus | None:  # fmt: skip
        """Send the stop signal, then SIGKILL when ``timeout`` passes (the record's stop
        timeout when None); return the exit (:func:`ctrexec.tasks.control.stop`). Then an
        ``auto_remove`` task is removed, as docker's stop of an ``--rm`` one, under the same
        lock (a supervisor's removal first is no error); ``remove=False`` keeps it."""
        with self._lock(task_id):
            status = taskctl.stop(self.client, task_id, timeout, signal)
            # no record to read without remove: a restart's or group down's stop
            if not remove or not self._remove_if_auto(task_id):
                return status
        self._forget(task_id)
        return status

    def pause(self, task_id: str) -> None:
        taskctl.pause(self.client, task_id)

    def resume(self, task_id: str) -> None:
        taskctl.resume(self.client, task_id)

    def destroy(self, task_id: str, *, force: bool = False, volumes: bool = False) -> None:
        """Remove task, container, snapshot, logs and host files; with ``volumes``
        (``rm -v``) or for a ``--rm`` container, its anonymous volumes too. The files and
        a ``run --network`` namespace go before the record, so a destroy cut short leaves
        a record that the next one finishes; without a record, the id's own host files
        and a rootfs snapshot no record holds are removed still, and NotFound is raised."""
        with self._lock(task_id):
            self._destroy(task_id, force=force, volumes=volumes)
        self._forget(task_id)
