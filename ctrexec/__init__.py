"""ctrexec: run containers through containerd's API in pre-created network namespaces.

The public API is re-exported here; everything else is private to the package.

The names are loaded on first use (PEP 562): ``import ctrexec`` or a light submodule
(the CLI's parser, :mod:`ctrexec.defaults`) must not pay for grpc, the generated stubs
and pyroute2. Type checkers and IDEs read the ``TYPE_CHECKING`` imports instead.
"""

from __future__ import annotations

import sys

from ctrexec.defaults import DEFAULT_NAMESPACE

#: ``typing`` would cost the command line's client (:mod:`ctrexec.cli.client`) most of
#: its start-up (it loads ``re`` and ``collections``); mypy reads this name as typing's.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType

    from ctrexec._linux import cgroup_v2_only
    from ctrexec._version import VERSION as __version__  # noqa: N811 (PEP 8 names it so)
    from ctrexec.containerd._proto import to_timestamp
    from ctrexec.containerd.client import (
        Client,
        Lease,
        Plugin,
        ServerInfo,
        ServerVersion,
    )
    from ctrexec.containerd.content import Platform
    from ctrexec.containerd.daemon import DaemonPaths, EmbeddedContainerd
    from ctrexec.containerd.events import (
        Event,
        EventsMissed,
        ExecExited,
        ExecStarted,
        TaskDeleted,
        TaskEvent,
        TaskExited,
        TaskOOM,
        TaskPaused,
        TaskResumed,
        TaskStarted,
    )
    from ctrexec.containerd.execs import DetachedExec, ExecResult
    from ctrexec.containerd.images import Image, ImageConfig, ImageSummary, list_images
    from ctrexec.containerd.stats import Stats
    from ctrexec.containerd.streams import OutputCallback, Process, StreamOptions
    from ctrexec.containerd.tasks import ExitStatus, Status
    from ctrexec.doctor.checks import Failure, GcReport, doctor, gc
    from ctrexec.doctor.findings import Check, Finding, Scope
    from ctrexec.doctor.prune import (
        ContainerFilter,
        ContainerPruneReport,
        SystemPruneReport,
        prune_containers,
        prune_system,
    )
    from ctrexec.errors import (
        AlreadyExists,
        AlreadyRunning,
        AmbiguousPrefix,
        Canceled,
        CNIError,
        CommandNotExecutable,
        CommandNotFound,
        Conflict,
        ConnectError,
        CtrexecError,
        DaemonError,
        DeadlineExceeded,
        DigestMismatch,
        FailedPrecondition,
        HandleMismatch,
        Internal,
        InvalidArgument,
        InvalidField,
        MissingArguments,
        NetworkError,
        NotATerminal,
        NotFound,
        NotModified,
        PermissionDenied,
        RegistryError,
        RegistryRefused,
        ResourceExhausted,
        TaskError,
        Unavailable,
        Unimplemented,
        UnknownCommand,
    )
    from ctrexec.groups.presence import is_supervised
    from ctrexec.groups.spec import GroupSpec, load_group_file, parse_group
    from ctrexec.groups.supervisor import Supervisor
    from ctrexec.groups.updown import Groups
    from ctrexec.images.commit import commit_container
    from ctrexec.images.exporter import export_archive
    from ctrexec.images.importer import ImportedImage, import_archive
    from ctrexec.images.lookup import ensure_image, get_image, remove_image
    from ctrexec.images.prune import PruneReport, prune_images
    from ctrexec.images.reference import normalize_reference
    from ctrexec.images.registry.auth import Credentials as RegistryCredentials
    from ctrexec.images.registry.auth import credentials_from_helper
    from ctrexec.images.registry.pull import PullEvent, ensure_pulled, pull
    from ctrexec.images.registry.push import PushResult, push
    from ctrexec.images.tagging import tag_image
    from ctrexec.images.usage import image_usage
    from ctrexec.logs.reader import LogEntry, read_logs, read_task_logs
    from ctrexec.net.cni import PortMapping
    from ctrexec.net.hostfiles import Resolver as ResolvConf
    from ctrexec.net.hostfiles import host_resolver
    from ctrexec.net.netns import NetNS
    from ctrexec.net.netns import create as create_netns
    from ctrexec.net.netns import list_namespaces as list_netns
    from ctrexec.net.netns import remove as remove_netns
    from ctrexec.net.networks import Attachment, Networks
    from ctrexec.net.nsinfo import Address, Interface, NetNSInfo, Route
    from ctrexec.net.nsinfo import inspect as inspect_netns
    from ctrexec.oci.caps import DEFAULT_CAPABILITIES, normalize_capability
    from ctrexec.tasks.aio import AsyncExecutor
    from ctrexec.tasks.cgroupfs import cgroupfs_relative
    from ctrexec.tasks.config import RestartPolicy, TaskConfig, TaskHandle, TaskInfo
    from ctrexec.tasks.events import EventFilter, TaskEvents
    from ctrexec.tasks.executor import Executor
    from ctrexec.tasks.nomadtasks import NomadTask, nomad_labels, nomad_task_id, nomad_tasks
    from ctrexec.tasks.rename import rename
else:
    ModuleType = type(sys)  # not ``types``: the command line's client does not load it

#: Where each lazily loaded public name is defined: all but ``DEFAULT_NAMESPACE``, even
#: the errors, which the command line's client would otherwise load for nothing.
_SOURCES: dict[str, tuple[str, ...]] = {
    "ctrexec.errors": (
        "AlreadyExists",
        "AlreadyRunning",
        "AmbiguousPrefix",
        "Canceled",
        "CNIError",
        "CommandNotExecutable",
        "CommandNotFound",
        "Conflict",
        "ConnectError",
        "CtrexecError",
        "DaemonError",
        "DeadlineExceeded",
        "DigestMismatch",
        "FailedPrecondition",
        "HandleMismatch",
        "Internal",
        "InvalidArgument",
        "InvalidField",
        "MissingArguments",
        "NetworkError",
        "NotATerminal",
        "NotFound",
        "NotModified",
        "PermissionDenied",
        "RegistryError",
        "RegistryRefused",
        "ResourceExhausted",
        "TaskError",
        "Unavailable",
        "Unimplemented",
        "UnknownCommand",
    ),
    "ctrexec.tasks.aio": ("AsyncExecutor",),
    "ctrexec.containerd.client": (
        "Client",
        "Lease",
        "Plugin",
        "ServerInfo",
        "ServerVersion",
    ),
    "ctrexec.containerd.content": ("Platform",),
    "ctrexec.doctor.checks": ("Failure", "GcReport", "doctor", "gc"),
    "ctrexec.doctor.findings": ("Check", "Finding", "Scope"),
    "ctrexec.doctor.prune": (
        "ContainerFilter",
        "ContainerPruneReport",
        "SystemPruneReport",
        "prune_containers",
        "prune_system",
    ),
    "ctrexec.containerd.daemon": (
        "DaemonPaths",
        "EmbeddedContainerd",
    ),
    "ctrexec.containerd.events": (
        "Event",
        "EventsMissed",
        "ExecExited",
        "ExecStarted",
        "TaskDeleted",
        "TaskEvent",
        "TaskExited",
        "TaskOOM",
        "TaskPaused",
        "TaskResumed",
        "TaskStarted",
    ),
    "ctrexec.containerd.execs": ("DetachedExec", "ExecResult"),
    "ctrexec.containerd.images": ("Image", "ImageConfig", "ImageSummary", "list_images"),
    "ctrexec.images.exporter": ("export_archive",),
    "ctrexec.images.importer": ("ImportedImage", "import_archive"),
    "ctrexec.images.lookup": ("ensure_image", "get_image", "remove_image"),
    "ctrexec.images.prune": ("PruneReport", "prune_images"),
    "ctrexec.images.reference": ("normalize_reference",),
    "ctrexec.images.usage": ("image_usage",),
    "ctrexec.images.tagging": ("tag_image",),
    "ctrexec.images.commit": ("commit_container",),
    "ctrexec.images.registry.push": ("PushResult", "push"),
    "ctrexec.containerd.stats": ("Stats",),
    "ctrexec.containerd.streams": (
        "OutputCallback",
        "Process",
        "StreamOptions",
    ),
    "ctrexec.containerd.tasks": (
        "ExitStatus",
        "Status",
    ),
    "ctrexec.tasks.executor": ("Executor",),
    "ctrexec._linux": ("cgroup_v2_only",),
    "ctrexec.containerd._proto": ("to_timestamp",),
    "ctrexec.images.registry.auth": ("credentials_from_helper",),
    "ctrexec.net.hostfiles": ("host_resolver",),
    "ctrexec.oci.caps": ("DEFAULT_CAPABILITIES", "normalize_capability"),
    "ctrexec.tasks.cgroupfs": ("cgroupfs_relative",),
    "ctrexec.tasks.nomadtasks": ("NomadTask", "nomad_labels", "nomad_task_id", "nomad_tasks"),
    "ctrexec.groups.spec": ("GroupSpec", "load_group_file", "parse_group"),
    "ctrexec.groups.updown": ("Groups",),
    "ctrexec.logs.reader": ("LogEntry", "read_logs", "read_task_logs"),
    "ctrexec.net.cni": ("PortMapping",),
    "ctrexec.net.netns": ("NetNS",),
    "ctrexec.net.nsinfo": ("Address", "Interface", "NetNSInfo", "Route"),
    "ctrexec.net.networks": ("Attachment", "Networks"),
    "ctrexec.tasks.rename": ("rename",),
    "ctrexec.groups.presence": ("is_supervised",),
    "ctrexec.groups.supervisor": ("Supervisor",),
    # The events names (Executor.events' types) are added with them.
    "ctrexec.images.registry.pull": (
        "PullEvent",
        "ensure_pulled",
        "pull",
    ),
    "ctrexec.tasks.config": (
        "RestartPolicy",
        "TaskConfig",
        "TaskHandle",
        "TaskInfo",
    ),
    "ctrexec.tasks.events": (
        "EventFilter",
        "TaskEvents",
    ),
}
#: Public names that are another name in their module: ``netns.create`` is too vague
#: at the top level.
_ALIASES: dict[str, tuple[str, str]] = {
    "RegistryCredentials": ("ctrexec.images.registry.auth", "Credentials"),
    "ResolvConf": ("ctrexec.net.hostfiles", "Resolver"),
    "__version__": ("ctrexec._version", "VERSION"),
    "create_netns": ("ctrexec.net.netns", "create"),
    "inspect_netns": ("ctrexec.net.nsinfo", "inspect"),
    "list_netns": ("ctrexec.net.netns", "list_namespaces"),
    "remove_netns": ("ctrexec.net.netns", "remove"),
}
_MODULE_OF = {name: (module, name) for module, names in _SOURCES.items() for name in names}
_MODULE_OF.update(_ALIASES)

__all__ = [
    "DEFAULT_CAPABILITIES",
    "DEFAULT_NAMESPACE",
    "Address",
    "AlreadyExists",
    "AlreadyRunning",
    "AmbiguousPrefix",
    "AsyncExecutor",
    "Attachment",
    "CNIError",
    "Canceled",
    "Check",
    "Client",
    "CommandNotExecutable",
    "CommandNotFound",
    "Conflict",
    "ConnectError",
    "ContainerFilter",
    "ContainerPruneReport",
    "CtrexecError",
    "DaemonError",
    "DaemonPaths",
    "DeadlineExceeded",
    "DetachedExec",
    "DigestMismatch",
    "EmbeddedContainerd",
    "Event",
    "EventFilter",
    "EventsMissed",
    "ExecExited",
    "ExecResult",
    "ExecStarted",
    "Executor",
    "ExitStatus",
    "FailedPrecondition",
    "Failure",
    "Finding",
    "GcReport",
    "GroupSpec",
    "Groups",
    "HandleMismatch",
    "Image",
    "ImageConfig",
    "ImageSummary",
    "ImportedImage",
    "Interface",
    "Internal",
    "InvalidArgument",
    "InvalidField",
    "Lease",
    "LogEntry",
    "MissingArguments",
    "NetNS",
    "NetNSInfo",
    "NetworkError",
    "Networks",
    "NomadTask",
    "NotATerminal",
    "NotFound",
    "NotModified",
    "OutputCallback",
    "PermissionDenied",
    "Platform",
    "Plugin",
    "PortMapping",
    "Process",
    "PruneReport",
    "PullEvent",
    "PushResult",
    "RegistryCredentials",
    "RegistryError",
    "RegistryRefused",
    "ResolvConf",
    "ResourceExhausted",
    "RestartPolicy",
    "Route",
    "Scope",
    "ServerInfo",
    "ServerVersion",
    "Stats",
    "Status",
    "StreamOptions",
    "Supervisor",
    "SystemPruneReport",
    "TaskConfig",
    "TaskDeleted",
    "TaskError",
    "TaskEvent",
    "TaskEvents",
    "TaskExited",
    "TaskHandle",
    "TaskInfo",
    "TaskOOM",
    "TaskPaused",
    "TaskResumed",
    "TaskStarted",
    "Unavailable",
    "Unimplemented",
    "UnknownCommand",
    "__version__",
    "cgroup_v2_only",
    "cgroupfs_relative",
    "commit_container",
    "create_netns",
    "credentials_from_helper",
    "doctor",
    "ensure_image",
    "ensure_pulled",
    "export_archive",
    "gc",
    "get_image",
    "host_resolver",
    "image_usage",
    "import_archive",
    "inspect_netns",
    "is_supervised",
    "list_images",
    "list_netns",
    "load_group_file",
    "nomad_labels",
    "nomad_task_id",
    "nomad_tasks",
    "normalize_capability",
    "normalize_reference",
    "parse_group",
    "prune_containers",
    "prune_images",
    "prune_system",
    "pull",
    "push",
    "read_logs",
    "read_task_logs",
    "remove_image",
    "remove_netns",
    "rename",
    "tag_image",
    "to_timestamp",
]


def __getattr__(name: str) -> object:
    where = _MODULE_OF.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = where
    value = getattr(__import__(module, fromlist=(attribute,)), attribute)  # not importlib: 0.4 ms
    globals()[name] = value  # later lookups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(ModuleType):
    """``doctor`` is a public function and the name of the subpackage that defines it.
    The import system sets a package's attribute to each subpackage it loads, so
    ``from ctrexec import gc, doctor`` (or any name of ``ctrexec.doctor`` first) gave the
    module, not the function. That setting of a public name is dropped: the subpackage
    is still imported by its dotted name (``from ctrexec.doctor.checks import ...``),
    which goes through ``sys.modules``."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in __all__ and isinstance(value, ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
