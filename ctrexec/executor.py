"""The scheduler-facing API: TaskConfig in, TaskHandle out, and the verbs on it.

Every verb maps to one of Nomad's task-driver calls (start, wait, stop, destroy,
inspect, signal, exec, stats, recover). State lives only in containerd: labels and
the TaskConfig extension on the container record, plus the task itself, so any
number of Executor instances, in any number of processes, agree on what exists.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import signal as signals
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ctrexec import containers, hostfiles, images, netns, snapshots, stats, tasks, taskspec
from ctrexec import labels as lbl
from ctrexec import logs as logstore
from ctrexec.client import Client
from ctrexec.errors import (
    AlreadyExists,
    CommandNotExecutable,
    CommandNotFound,
    CtrexecError,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    TaskError,
)
from ctrexec.execs import run_exec
from ctrexec.oci.process import merge_env
from ctrexec.oci.user import ResolvedUser, resolve_user_spec
from ctrexec.taskconfig import ExecResult, TaskConfig, TaskHandle, TaskInfo
from ctrexec.tasks import ExitStatus, Status, Stdio

DEFAULT_LOG_DIR = Path("/var/log/ctrexec")
#: The lease that guards a new snapshot until the container record holds it.
CREATE_LEASE_TTL = timedelta(minutes=10)


def host_files_ready(directory: Path) -> bool:
    """Whether a namespace's shared files were all written."""
    return all((directory / n).exists() for n in ("hosts", "resolv.conf", "hostname"))


DEFAULT_KILL_GRACE = 10.0


class Executor:
    """Runs tasks in one containerd namespace. Thread-safe: it holds no mutable state
    besides per-container locks that serialise start/stop/destroy of the same task."""

    def __init__(
        self,
        client: Client,
        *,
        log_dir: Path = DEFAULT_LOG_DIR,
        files_dir: Path = hostfiles.DEFAULT_DIR,
    ) -> None:
        self.client = client
        self.log_dir = Path(log_dir)
        self.files_dir = Path(files_dir)
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def _lock(self, task_id: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(task_id, threading.Lock())

    # -- create -------------------------------------------------------------------

    def create(
        self, config: TaskConfig, *, owner_labels: Mapping[str, str] | None = None
    ) -> containers.Container:
        """Create the container record and its rootfs snapshot; do not run anything.

        All checks run first; a failure after the first side effect undoes it.
        ``owner_labels`` are ctrexec's own keys set by a caller such as groups (user
        labels may not use that prefix); they land in the same Create call.
        """
        checked = taskspec.check_config(config, containerd_address=self.client.address)
        netns_path, mode = self._resolve_netns(config.netns)
        if self._exists(config.name):
            raise AlreadyExists(f"container name {config.name!r} is already in use")
        image = images.ensure_image(self.client, config.image, snapshotter=config.snapshotter)
        user = self._resolve_user(image, config.user or image.config.user, config.snapshotter)
        top = image.chain_ids[-1] if image.chain_ids else ""
        log_path = self.log_dir / self.client.namespace / config.name / "task.log"
        # The spec needs only the files' paths; they are written once the record exists
        # (here, or by start()), so a crash in between leaves no orphan files behind.
        files = (
            hostfiles.HostFiles(self.files_dir / hostfiles.key_for(netns_path))
            if mode == "path" and netns_path is not None
            else None
        )
        spec = taskspec.build(
            checked,
            image_entrypoint=image.config.entrypoint,
            image_cmd=image.config.cmd,
            image_env=image.config.env,
            image_workdir=image.config.working_dir,
            user=user,
            netns_path=netns_path,
            host_network=mode == "host",
            hostfiles=files,
            namespace=self.client.namespace,
            containerd_address=self.client.address,
        )
        record_labels = {
            **checked.labels,
            lbl.MANAGED: "true",
            lbl.NETNS_MODE: mode,
            lbl.LOG_PATH: str(log_path),
            lbl.IMAGE_REF: config.image,
            lbl.STOP_TIMEOUT: str(config.stop_timeout),
            lbl.STOP_SIGNAL: config.stop_signal or image.config.stop_signal or "SIGTERM",
            **(owner_labels or {}),
        }
        if netns_path is not None:
            record_labels[lbl.NETNS_PATH] = netns_path
        if files is not None:
            record_labels[lbl.HOSTFILES_DIR] = str(files.directory)
        if config.group:
            record_labels[lbl.GROUP] = config.group
        if config.auto_remove:
            record_labels[lbl.AUTO_REMOVE] = "true"
        if config.restart.policy != "no":
            record_labels[lbl.RESTART_POLICY] = config.restart.policy
            record_labels[lbl.RESTART_MAX] = str(config.restart.max_attempts)
            record_labels[lbl.RESTART_DELAY] = str(config.restart.delay)
        # A unique key: a snapshot orphaned by a crash before Containers.Create (held
        # only by the expiring lease) must not block the name until the lease expires.
        snapshot_key = f"{config.name}-{secrets.token_hex(4)}"
        with self.client.lease(ttl=CREATE_LEASE_TTL) as lease:
            snapshots.prepare_rootfs(
                self.client, snapshot_key, top, snapshotter=config.snapshotter, lease=lease.id
            )
            try:
                record = containers.create(
                    self.client,
                    config.name,
                    image=image.name,
                    spec=spec,
                    snapshotter=config.snapshotter,
                    snapshot_key=snapshot_key,
                    runtime=checked.runtime.to_runtime(),
                    labels=record_labels,
                    extensions={
                        lbl.CONFIG_EXTENSION: containers.json_extension(
                            lbl.CONFIG_TYPE_URL, config.to_json()
                        )
                    },
                    lease=lease.id,
                )
            except BaseException:
                snapshots.remove_snapshot(self.client, snapshot_key, config.snapshotter)
                raise
        if files is not None and netns_path is not None:
            self._ensure_files(record, netns_path, config)
        return record

    @staticmethod
    def _ensure_files(
        record: containers.Container, netns_path: str, config: TaskConfig | None
    ) -> None:
        """Write the namespace's files where the record says they are (once)."""
        directory = Path(record.labels[lbl.HOSTFILES_DIR])
        hostname = (config.hostname or taskspec.default_hostname(config)) if config else record.id
        hostfiles.ensure(netns_path, hostname=hostname, base=directory.parent)

    def _exists(self, task_id: str) -> bool:
        try:
            containers.get(self.client, task_id)
        except NotFound:
            return False
        return True

    def _resolve_netns(self, value: str) -> tuple[str | None, str]:
        if value == "host":
            return None, "host"
        if value in ("none", ""):
            return None, "none"
        path = netns.resolve(value)
        netns.verify(path)
        return path, "path"

    def _resolve_user(self, image: images.Image, user: str, snapshotter: str) -> ResolvedUser:
        if not user:
            return ResolvedUser(uid=0, gid=0)
        if not taskspec.rootfs_user_needed(user):
            return resolve_user_spec(user, None, None)
        files = images.read_rootfs_files(
            self.client, image, ["/etc/passwd", "/etc/group"], snapshotter=snapshotter
        )
        passwd, group = files.get("/etc/passwd"), files.get("/etc/group")
        return resolve_user_spec(
            user,
            passwd.decode(errors="replace") if passwd is not None else None,
            group.decode(errors="replace") if group is not None else None,
        )

    # -- start ----------------------------------------------------------------------

    def start(self, task_id: str, *, by_policy: bool = False) -> TaskHandle:
        """Start (or start again) the task of an existing container.

        A start by hand clears the "stopped by user" mark and the restart count, as
        docker does; the supervisor passes ``by_policy=True`` to keep them.
        """
        with self._lock(task_id):
            record = containers.get(self.client, task_id)
            if not by_policy and (
                lbl.STOPPED_BY_USER in record.labels or lbl.RESTART_COUNT in record.labels
            ):
                record = containers.update_labels(
                    self.client, task_id, {lbl.STOPPED_BY_USER: None, lbl.RESTART_COUNT: None}
                )
            state = tasks.find(self.client, task_id)
            if state is not None and state.status not in (Status.STOPPED, Status.CREATED):
                raise FailedPrecondition(f"container {task_id} is already {state.status.value}")
            if state is not None and state.status is Status.CREATED:
                # A start that died between Tasks.Create and Tasks.Start: begin again.
                tasks.force_delete(self.client, task_id)
            # Also with no task: this shuts down a shim left without one (see
            # tasks.force_delete); a plain NotFound is ignored.
            tasks.delete(self.client, task_id)
            log_path = record.labels.get(lbl.LOG_PATH, "")
            cfg = self._config_of(record)
            Path(log_path).parent.mkdir(parents=True, exist_ok=True)
            uri = logstore.log_uri(
                log_path,
                cfg.log_max_size if cfg else logstore.DEFAULT_MAX_SIZE,
                cfg.log_max_files if cfg else logstore.DEFAULT_MAX_FILES,
            )
            mounts = snapshots.snapshot_mounts(self.client, record.snapshot_key, record.snapshotter)
            netns_path = record.labels.get(lbl.NETNS_PATH)
            if netns_path:
                netns.verify(netns_path)  # the namespace may have been removed since
                files_dir = record.labels.get(lbl.HOSTFILES_DIR)
                if files_dir and not host_files_ready(Path(files_dir)):
                    self._ensure_files(record, netns_path, cfg)
            try:
                tasks.create(
                    self.client,
                    task_id,
                    rootfs=[m.to_proto() for m in mounts],
                    stdio=Stdio(stdout=uri, stderr=uri),
                )
            except CtrexecError as exc:
                raise _command_error(exc) from exc
            pending = tasks.arm_wait(self.client, task_id)
            try:
                pid = tasks.start(self.client, task_id)
            except CtrexecError as exc:
                pending.cancel()
                tasks.force_delete(self.client, task_id)
                raise _command_error(exc) from exc
            pending.cancel()
            return TaskHandle(
                id=task_id,
                namespace=self.client.namespace,
                address=self.client.address,
                pid=pid,
                started_at=datetime.now(UTC),
                netns_path=netns_path,
                log_path=log_path,
            )

    def start_task(self, config: TaskConfig) -> TaskHandle:
        """Create and start; a start that fails removes what create made."""
        self.create(config)
        try:
            return self.start(config.name)
        except BaseException:
            with contextlib.suppress(CtrexecError):
                self.destroy(config.name, force=True)
            raise

    # -- observe ----------------------------------------------------------------------

    def wait(self, task_id: str, timeout: float | None = None) -> ExitStatus:
        """Block until the task exits (DeadlineExceeded after ``timeout`` seconds)."""
        pending = tasks.arm_wait(self.client, task_id)
        try:
            return tasks.collect(pending, timeout)
        finally:
            pending.cancel()

    def inspect(self, task_id: str) -> TaskInfo:
        return self._info(containers.get(self.client, task_id), tasks.find(self.client, task_id))

    def list(self, *, all_tasks: bool = False) -> list[TaskInfo]:
        records = containers.list_containers(
            self.client, containers.label_filter(lbl.MANAGED, "true")
        )
        states = {t.container_id: t for t in tasks.list_tasks(self.client)}
        infos = [self._info(r, states.get(r.id)) for r in records]
        if not all_tasks:
            infos = [i for i in infos if i.status in (Status.RUNNING, Status.PAUSED)]
        return sorted(infos, key=lambda i: i.id)

    def _info(self, record: containers.Container, state: tasks.ProcessState | None) -> TaskInfo:
        return TaskInfo(
            id=record.id,
            image=record.labels.get(lbl.IMAGE_REF, record.image),
            status=state.status if state else Status.CREATED,
            pid=state.pid if state else 0,
            exit=state.exit if state else None,
            netns_path=record.labels.get(lbl.NETNS_PATH),
            netns_mode=record.labels.get(lbl.NETNS_MODE, "none"),
            group=record.labels.get(lbl.GROUP),
            log_path=record.labels.get(lbl.LOG_PATH, ""),
            labels=record.labels,
            created_at=record.created_at,
            config=self._config_of(record),
        )

    @staticmethod
    def _config_of(record: containers.Container) -> TaskConfig | None:
        data = record.extension_json(lbl.CONFIG_EXTENSION)
        if data is None:
            return None
        try:
            return TaskConfig.from_json(data)
        except InvalidArgument:
            return None

    def stats(self, task_id: str) -> stats.Stats:
        data = tasks.metrics(self.client, task_id)
        if data is None:
            raise NotFound(f"no running task for container {task_id}")
        return stats.decode(data)

    def recover(self, handle: TaskHandle) -> TaskInfo:
        """Re-attach to a task from a persisted handle; report an exit that happened meanwhile.

        The task is not touched: a running task stays running, a stopped one keeps its
        exit status (containerd holds it until the task is deleted).
        """
        if handle.namespace != self.client.namespace:
            raise InvalidArgument(
                f"handle is for namespace {handle.namespace}, executor uses {self.client.namespace}"
            )
        return self.inspect(handle.id)

    # -- act ---------------------------------------------------------------------------

    def signal(self, task_id: str, sig: int | str) -> None:
        num = taskspec.parse_signal(sig)
        if tasks.find(self.client, task_id) is None:
            raise NotFound(f"container {task_id} has no task")
        tasks.kill(self.client, task_id, num)

    def stop(
        self, task_id: str, timeout: float | None = None, signal: int | str | None = None
    ) -> ExitStatus | None:
        """Send the stop signal, then SIGKILL when ``timeout`` passes; return the exit.

        No fixed sleep: the armed Wait returns the moment the task exits.
        """
        with self._lock(task_id):
            record = containers.get(self.client, task_id)
            state = tasks.find(self.client, task_id)
            if state is None:
                return None
            if state.status is Status.STOPPED:
                return state.exit
            sig = taskspec.parse_signal(signal or record.labels.get(lbl.STOP_SIGNAL, "SIGTERM"))
            grace = (
                float(record.labels.get(lbl.STOP_TIMEOUT, DEFAULT_KILL_GRACE))
                if timeout is None
                else timeout
            )
            if lbl.RESTART_POLICY in record.labels:
                # Mark first, so a supervisor seeing the exit knows not to restart it.
                containers.update_labels(self.client, task_id, {lbl.STOPPED_BY_USER: "true"})
            if state.status is Status.PAUSED:
                tasks.resume(self.client, task_id)
            pending = tasks.arm_wait(self.client, task_id)
            try:
                tasks.kill(self.client, task_id, sig)
                with contextlib.suppress(DeadlineExceeded):
                    return tasks.collect(pending, grace)
                tasks.kill(self.client, task_id, signals.SIGKILL, all_processes=True)
                return tasks.collect(pending, DEFAULT_KILL_GRACE)
            finally:
                pending.cancel()

    def pause(self, task_id: str) -> None:
        tasks.pause(self.client, task_id)

    def resume(self, task_id: str) -> None:
        tasks.resume(self.client, task_id)

    def destroy(self, task_id: str, *, force: bool = False) -> None:
        """Remove task, container, snapshot, logs and unused namespace files."""
        with self._lock(task_id):
            record = containers.get(self.client, task_id)
            state = tasks.find(self.client, task_id)
            if state is not None and state.status is not Status.STOPPED and not force:
                raise FailedPrecondition(
                    f"container {task_id} is {state.status.value}; stop it first or force"
                )
            tasks.force_delete(self.client, task_id)
            containers.delete(self.client, task_id)
            # A Tasks.Create sent by a ctrexec that died mid-call can still land after
            # the first delete; containerd does not stop it for a deleted container.
            tasks.force_delete(self.client, task_id)
            # Such a Create that containerd cancelled can leave a shim serving nothing,
            # with our log driver, that containerd no longer knows (containerd 1.6).
            if record.labels.get(lbl.LOG_PATH):
                logstore.stop_orphaned_drivers(
                    record.labels[lbl.LOG_PATH], self.client.namespace, task_id
                )
            snapshots.remove_snapshot(self.client, record.snapshot_key, record.snapshotter)
            log_path = record.labels.get(lbl.LOG_PATH)
            if log_path:
                shutil.rmtree(Path(log_path).parent, ignore_errors=True)
                with contextlib.suppress(OSError):  # the namespace's dir, once empty
                    Path(log_path).parent.parent.rmdir()
            files_dir = record.labels.get(lbl.HOSTFILES_DIR)
            if files_dir and not containers.list_containers(
                self.client, containers.label_filter(lbl.HOSTFILES_DIR, files_dir)
            ):
                hostfiles.remove_dir(Path(files_dir))
            # The task's own cgroup can outlive Delete for a moment while the kernel
            # finishes tearing down its processes; the parents go with the last task.
            leaf = f"ctrexec/{self.client.namespace}/{task_id}"
            last = not containers.list_containers(self.client)
            tasks.wait_until(
                lambda: remove_empty_cgroups(leaf, parents=last),
                timeout=2.0,
            )
        with self._locks_guard:
            self._locks.pop(task_id, None)

    def exec(
        self,
        task_id: str,
        args: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        """Run a command in the task and return its exit code and output."""
        if not args:
            raise InvalidArgument("exec needs a command")
        record = containers.get(self.client, task_id)
        state = tasks.find(self.client, task_id)
        if state is None or state.status is not Status.RUNNING:
            raise FailedPrecondition(f"container {task_id} is not running")
        proc = dict(record.spec.get("process", {}))
        proc["args"] = list(args)
        proc["terminal"] = False
        if env:
            proc["env"] = merge_env(proc.get("env", []), env)
        if workdir:
            proc["cwd"] = workdir
        if user:
            if taskspec.rootfs_user_needed(user):
                cfg = self._config_of(record)
                image = images.get_image(self.client, record.image)
                resolved = self._resolve_user(image, user, cfg.snapshotter if cfg else "overlayfs")
            else:
                resolved = resolve_user_spec(user, None, None)
            proc["user"] = {
                "uid": resolved.uid,
                "gid": resolved.gid,
                "additionalGids": list(resolved.additional_gids),
            }
        try:
            return run_exec(self.client, task_id, proc, timeout=timeout)
        except TaskError:
            raise
        except CtrexecError as exc:
            raise _command_error(exc) from exc


CGROUP_ROOT = Path("/sys/fs/cgroup")


def remove_empty_cgroups(relative: str, *, parents: bool = True) -> bool:
    """rmdir a task's cgroup and, with ``parents``, the parents runc made for it.

    runc removes a task's own cgroup but not the ``/ctrexec/<namespace>`` parents it
    created; the kernel refuses to remove a cgroup that still has children or
    processes, so a parent still in use by another task stays. Returns True when the
    task's own cgroup is gone from every hierarchy.
    """
    hierarchies = [CGROUP_ROOT, *[p for p in CGROUP_ROOT.iterdir() if p.is_dir()]]
    parts = Path(relative).parts
    gone = True
    for base in hierarchies:
        for depth in range(len(parts), 0 if parents else len(parts) - 1, -1):
            path = base.joinpath(*parts[:depth])
            try:
                path.rmdir()
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError:
                if depth == len(parts):
                    gone = False
                break
    return gone


def _command_error(exc: CtrexecError) -> CtrexecError:
    """Turn runc's 'not found' / 'permission denied' into docker's 126/127 errors."""
    text = str(exc)
    if "executable file not found" in text or "no such file or directory" in text:
        return CommandNotFound(f"command not found: {_runc_reason(text)}")
    if "permission denied" in text:
        return CommandNotExecutable(f"command cannot be executed: {_runc_reason(text)}")
    return exc


def _runc_reason(text: str) -> str:
    marker = "exec: "
    return text[text.rfind(marker) + len(marker) :] if marker in text else text
