"""Every label and annotation key ctrexec writes, in one place.

ctrexec has no database: what it needs to find its objects again after a restart is
written as labels on containerd's own records. Users may not set keys under these
prefixes (nor under ``containerd.io/``), so nothing they pass can forge ownership.
"""

from __future__ import annotations

from collections.abc import Mapping

from ctrexec.errors import InvalidArgument

PREFIX = "io.ctrexec."
CONTAINERD_PREFIX = "containerd.io/"

#: Marks a container as created by ctrexec; ``ps`` and ``gc`` look only at these.
MANAGED = "io.ctrexec.managed"
#: The group (allocation) a task belongs to; shared netns and shim.
GROUP = "io.ctrexec.group"
#: How the network namespace was chosen: "path", "host" or "none".
NETNS_MODE = "io.ctrexec.net.netns.mode"
#: The network namespace path written into the spec.
NETNS_PATH = "io.ctrexec.net.netns.path"
#: Where the log driver writes the task's stdout and stderr.
LOG_PATH = "io.ctrexec.log.path"
#: The signal and grace period ``stop`` uses.
STOP_SIGNAL = "io.ctrexec.stop.signal"
STOP_TIMEOUT = "io.ctrexec.stop.timeout"
#: The directory holding the namespace's shared hosts/resolv.conf/hostname files.
HOSTFILES_DIR = "io.ctrexec.net.netns.files"
#: The image reference the user asked for, before normalisation.
IMAGE_REF = "io.ctrexec.image.ref"
#: The image's ID (its config digest, ``sha256:...``) when the container was made:
#: docker's ``inspect`` ``.Image``, kept as docker keeps it, whatever the tag names later.
IMAGE_ID = "io.ctrexec.image.id"
#: Set when the image names a WorkingDir (``/`` included): ``inspect`` then shows the
#: task's ``/`` as docker does, where an image without one shows "".
IMAGE_WORKDIR = "io.ctrexec.image.workdir"
#: How many of the task's argv are the image's Entrypoint (written when the config
#: sets none), so ``inspect`` splits ``Config.Entrypoint`` from ``Config.Cmd`` as
#: docker does without reading the image again.
IMAGE_ENTRYPOINT_ARGS = "io.ctrexec.image.entrypoint-args"
#: The volumes a container mounts (names, comma-separated), and which of them are its
#: own anonymous ones (removed with it by ``rm -v`` and ``run --rm``): how ``volume rm``
#: and ``volume ls --filter dangling`` tell which volumes are in use.
VOLUMES = "io.ctrexec.volumes"
ANONYMOUS_VOLUMES = "io.ctrexec.volumes.anonymous"
#: Remove the container when its task exits (``run --rm``).
AUTO_REMOVE = "io.ctrexec.auto-remove"
#: Restart policy, read by ``ctrexec supervise``.
RESTART_POLICY = "io.ctrexec.restart.policy"
RESTART_MAX = "io.ctrexec.restart.max-attempts"
RESTART_DELAY = "io.ctrexec.restart.delay"
#: How many times the supervisor restarted the task since it was last started by hand;
#: written, with the two below, once the restart's task has started.
RESTART_COUNT = "io.ctrexec.restart.count"
#: The delay (seconds) the supervisor waited before its last restart; the next one
#: doubles it unless the task ran long enough (see ``backoff.next_delay``).
RESTART_BACKOFF = "io.ctrexec.restart.backoff"
#: When the supervisor began its last restart (ISO 8601), to tell how long it ran.
RESTART_STARTED_AT = "io.ctrexec.restart.started-at"
#: Set by ``stop``: a task a user stopped is not restarted by policy (docker's rule).
STOPPED_BY_USER = "io.ctrexec.restart.stopped-by-user"
#: Set ("true") by the supervisor before it schedules a restart, removed once the
#: restart happened (or is called off: ``stop``, a start by hand, the policy gives up),
#: so ``ps`` in any process can say docker's ``Restarting (CODE) N seconds ago``.
RESTART_PENDING = "io.ctrexec.restart.pending"
#: Why the supervisor's last restart failed (it retries on the backoff); removed by
#: the next restart that happens. ``inspect`` shows it.
RESTART_ERROR = "io.ctrexec.restart.error"
#: When the pending restart is due (ISO 8601), written with RESTART_PENDING and at each
#: retry: a supervisor started meanwhile waits only what is left of the backoff, and
#: doctor tells a restart that is overdue (no supervisor is making it). Removed with
#: the pending mark by the restart, a start by hand, a stop.
RESTART_DUE = "io.ctrexec.restart.due"
#: The network mode of the task's group namespace (none, host, bridge, cni:NAME).
NETWORK_MODE = "io.ctrexec.network.mode"
#: A hash of the group definition, so a second, different group of one name is refused.
GROUP_SPEC = "io.ctrexec.group.spec-hash"
#: A hash of one member's own definition (its task in the group file), so ``group up``
#: of an edited file recreates only the members whose definition changed.
MEMBER_SPEC = "io.ctrexec.group.member-hash"
#: The group's published ports (``[IP:]HOST:CONTAINER/PROTO``, comma-separated), so
#: ``inspect`` can say them without reading CNI's cache.
GROUP_PORTS = "io.ctrexec.group.ports"
#: The addresses of the task's network namespace (comma-separated), as the caller that
#: wired it knows them: the task's own /etc/hosts entry names them.
ADDRESSES = "io.ctrexec.net.addresses"
#: The members of the task's group, itself included, as ``ID:TASK:HOSTNAME`` entries
#: (comma-separated; ':' and ',' are in no id nor hostname), e.g.
#: ``web-app:app:web,web-db:db:db``: the shared part of each member's /etc/hosts names
#: each by its container id, task name and hostname (:mod:`ctrexec.tasks.files`).
GROUP_MEMBERS = "io.ctrexec.group.members"
#: The group was made by ``run --network``/``-p`` for one container: removing the
#: container removes its namespace and network too. The value is the network settings
#: it was wired with (JSON, :mod:`ctrexec.net.settings`), so any process tears it down.
IMPLICIT_GROUP = "io.ctrexec.group.implicit"
#: The network settings (JSON, :mod:`ctrexec.net.settings`) a ``group up`` member's
#: namespace was wired with, so any process that starts it (``start``, the supervisor)
#: can make and wire the namespace again when it is gone. A ``run -p`` container's are
#: in :data:`IMPLICIT_GROUP`.
NETWORK_SETTINGS = "io.ctrexec.net.settings"
#: Why the current run ended when no exit was seen (``host restarted``: its task went
#: with the host's restart or with containerd's, and no restart policy brought it back).
EXIT_REASON = "io.ctrexec.exit.reason"
#: Which run of the container the current task is: 1 for the first start, +1 for each
#: start after it (by hand or by the supervisor). A handle names its run by it.
RUN_ID = "io.ctrexec.run.id"
#: When ctrexec began starting the current run (ISO 8601): written with its number,
#: in the call that has to be made anyway (Containers.Create, or the restart's label
#: update that keeps the replaced run's exit), so a start costs no extra round trip.
RUN_STARTED_AT = "io.ctrexec.run.started-at"
#: The run before the current one, as JSON (run, pid, started_at and its exit), written
#: when the next run starts: containerd forgets a task's exit when it is deleted.
RUN_PREVIOUS = "io.ctrexec.run.previous"

#: Container extension holding the JSON TaskConfig, so recovery can rebuild it.
CONFIG_EXTENSION = "io.ctrexec.task-config"
CONFIG_TYPE_URL = "types.ctrexec.io/TaskConfig/v1"

#: runc v2 shim annotation: containers with the same value share one shim process.
SHIM_GROUP_ANNOTATION = "io.containerd.runc.v2.group"

#: A task started by the Nomad driver: Nomad's task id (``<alloc>/<task>/<random>``),
#: its allocation and task name, so the driver finds what it owns after a restart.
NOMAD_TASK_ID = "io.ctrexec.nomad.task-id"
NOMAD_ALLOC_ID = "io.ctrexec.nomad.alloc-id"
NOMAD_TASK_NAME = "io.ctrexec.nomad.task-name"

MAX_LABEL_BYTES = 4096


def validate_user_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """Refuse reserved or oversized user labels before anything is created."""
    out: dict[str, str] = {}
    for key, value in labels.items():
        if not key or any(c.isspace() for c in key):
            raise InvalidArgument(f"invalid label key {key!r}")
        if key.startswith(CONTAINERD_PREFIX):
            raise InvalidArgument(f"label {key!r} is reserved for containerd")
        if key.startswith(PREFIX):
            raise InvalidArgument(f"label {key!r} is reserved for ctrexec")
        if len(key.encode()) + len(value.encode()) > MAX_LABEL_BYTES:
            raise InvalidArgument(f"label {key!r} is longer than {MAX_LABEL_BYTES} bytes")
        out[key] = value
    return out
