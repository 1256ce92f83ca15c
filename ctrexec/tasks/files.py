"""What goes into a task's /etc/hosts, /etc/resolv.conf and /etc/hostname, and when.

Every task gets the three files, whatever its network (docker's behaviour):

- joined to a namespace, or in a new empty one (``none``): docker's loopback lines, the
  task's extra hosts, its own hostname on its namespace's addresses (the record's
  :data:`~ctrexec.labels.ADDRESSES`, else 127.0.1.1), then its group's members
  (:data:`~ctrexec.labels.GROUP_MEMBERS`); the host's resolver without its loopback
  servers, unless the task has a resolver of its own;
- on the host's network: the host's /etc/hosts and /etc/resolv.conf as they are (the
  host's loopback resolver is reachable there), plus the extra hosts and the task's
  hostname (its UTS namespace stays its own).

They are written once the record exists (a crash before leaves nothing behind), and
again by start for any that went missing (a reboot empties /run); the record's
:data:`~ctrexec.labels.HOSTFILES_DIR` label says where, so destroy removes them.
"""

from __future__ import annotations

import contextlib
import ipaddress
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from ctrexec import labels as lbl
from ctrexec.containerd import containers
from ctrexec.containerd.client import Client
from ctrexec.errors import NotFound
from ctrexec.net import hostfiles
from ctrexec.net.hostfiles import HostFiles, HostsEntries
from ctrexec.tasks import output as taskoutput
from ctrexec.tasks import spec as taskspec
from ctrexec.tasks.config import TaskConfig


def for_task(base: Path, namespace: str, config: TaskConfig) -> HostFiles:
    """Where a new task's files go (only paths: nothing is written yet)."""
    return hostfiles.task_dir(base, namespace, config.name)


def log_path(root: Path, namespace: str, container_id: str) -> Path:
    """Where a task's log goes: a directory of its own per namespace and id, which
    destroy (or the cleanup of a record deleted outside ctrexec) removes whole."""
    return root / namespace / container_id / "task.log"


def hosts_entries(
    task_id: str, labels: Mapping[str, str], config: TaskConfig | None
) -> HostsEntries:
    """The task's /etc/hosts content, from its record's labels and its config."""
    host_network = labels.get(lbl.NETNS_MODE) == "host"
    addresses = [a for a in labels.get(lbl.ADDRESSES, "").split(",") if _is_ip(a)]
    extra = config.extra_hosts if config is not None else ()
    return HostsEntries(
        hostname=_hostname(task_id, config),
        addresses=tuple(addresses),
        members=hostfiles.parse_members(labels.get(lbl.GROUP_MEMBERS, "")),
        extra_hosts=tuple(hostfiles.parse_extra_host(e) for e in extra),
        base=hostfiles.read_host_file(hostfiles.HOST_HOSTS) if host_network else None,
    )


def rewrite_hosts(task_id: str, labels: Mapping[str, str], config: TaskConfig | None) -> None:
    """Write the hosts file again, in place, after the record's addresses changed (a
    re-attached group that could not get its address back); a record with no files
    has none to write."""
    directory = labels.get(lbl.HOSTFILES_DIR)
    if directory:
        text = hostfiles.render_hosts(hosts_entries(task_id, labels, config))
        hostfiles.overwrite(HostFiles(Path(directory)).hosts, text)


def resolv_conf(labels: Mapping[str, str], config: TaskConfig | None) -> str:
    """The task's own resolver config, else the host's (without loopback servers
    unless the task is on the host's network)."""
    own = taskspec.resolv_conf(config)
    if own is not None:
        return own
    host_text = hostfiles.read_host_file(hostfiles.HOST_RESOLV)
    keep = labels.get(lbl.NETNS_MODE) == "host"
    return hostfiles.render_resolv_conf(host_text, keep_loopback=keep)


def _is_ip(text: str) -> bool:
    """A label is not user input, but a bad line in /etc/hosts misleads every lookup."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _hostname(task_id: str, config: TaskConfig | None) -> str:
    if config is None:
        return task_id
    return config.hostname or taskspec.default_hostname(config)


def write(
    task_id: str, labels: Mapping[str, str], config: TaskConfig | None, *, replace: bool
) -> None:
    """Write the files where the record's label says; ``replace`` at create, else only
    the missing ones. A record without the label (made by an older ctrexec on the
    host's network or none) has no files to write."""
    directory = labels.get(lbl.HOSTFILES_DIR)
    if not directory or (not replace and hostfiles.all_written(Path(directory))):
        return
    hostfiles.ensure(
        HostFiles(Path(directory)),
        hosts=hostfiles.render_hosts(hosts_entries(task_id, labels, config)),
        resolv_conf=resolv_conf(labels, config),
        hostname=_hostname(task_id, config),
        replace=replace,
    )


def remove(client: Client, record: containers.Container, *, state_dir: Path | None) -> None:
    """Remove a container's own files: its log directory (its runs forgotten first by the
    log daemon of ``state_dir``) and its host files. Before its record goes, so that a
    destroy cut short leaves the record that owns them, for the next destroy to finish."""
    log_path = record.labels.get(lbl.LOG_PATH)
    if log_path:
        taskoutput.forget(state_dir, log_path=log_path)
        shutil.rmtree(Path(log_path).parent, ignore_errors=True)
        with contextlib.suppress(OSError):  # the namespace's dir, once empty
            Path(log_path).parent.parent.rmdir()
    files_dir = record.labels.get(lbl.HOSTFILES_DIR)
    if files_dir and _unshared(client, record.id, files_dir):
        hostfiles.remove_dir(Path(files_dir))


def _unshared(client: Client, own_id: str, directory: str) -> bool:
    """Whether a record's files directory is no other record's: a task's own always; a
    namespace's of an older version once no other task names it."""
    if "+" in Path(directory).name:
        return True
    named = containers.list_containers(
        client, containers.label_filter(lbl.HOSTFILES_DIR, directory)
    )
    return all(c.id == own_id for c in named)


def roots_of(labels: Mapping[str, str], namespace: str, container_id: str) -> tuple[Path, Path]:
    """The log root and host-files base a record's labels name, when their paths are
    this id's own in this namespace (else the empty path: nothing is taken from a
    label that points elsewhere)."""
    log = Path(labels.get(lbl.LOG_PATH) or ".")
    log_root = log.parents[2] if len(log.parents) > 2 else Path()
    if log_path(log_root, namespace, container_id) != log:
        log_root = Path()
    files = Path(labels.get(lbl.HOSTFILES_DIR) or ".")
    files_base = files.parent
    if hostfiles.task_dir(files_base, namespace, container_id).directory != files:
        files_base = Path()
    return log_root, files_base


def remove_orphaned(
    client: Client,
    container_id: str,
    *,
    log_roots: Iterable[Path],
    files_bases: Iterable[Path],
    state_dir: Path | None,
) -> list[Path]:
    """Remove the log and host-files directories of a container whose record is gone
    (deleted outside ctrexec: ctrexec's destroy removes them before the record); only
    the id's own in this namespace, under the roots given. Returns what it removed:
    nothing when the record exists (its destroy's to remove) or nothing was left."""
    try:
        containers.get(client, container_id)
    except NotFound:
        pass
    else:
        return []
    ns, removed = client.namespace, []
    for root in {r for r in log_roots if r != Path()}:
        log = log_path(root, ns, container_id)
        if log.parent.is_dir():
            taskoutput.forget(state_dir, log_path=str(log))
            shutil.rmtree(log.parent, ignore_errors=True)
            removed.append(log.parent)
            with contextlib.suppress(OSError):  # the namespace's dir, once empty
                log.parent.parent.rmdir()
    for base in {b for b in files_bases if b != Path()}:
        files = hostfiles.task_dir(base, ns, container_id).directory
        if files.exists():
            hostfiles.remove_dir(files)
            removed.append(files)
    return removed
