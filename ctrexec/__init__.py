"""ctrexec: run containers through containerd's API in pre-created network namespaces.

The public API is re-exported here; everything else is private to the package.

The names are loaded on first use (PEP 562): ``import ctrexec`` or a light submodule
(the CLI's parser, :mod:`ctrexec.defaults`) must not pay for grpc, the generated stubs
and pyroute2. Type checkers and IDEs read the ``TYPE_CHECKING`` imports instead.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ctrexec.defaults import DEFAULT_NAMESPACE
from ctrexec.errors import (
    AlreadyExists,
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
    Internal,
    InvalidArgument,
    InvalidField,
    NetworkError,
    NotFound,
    NotModified,
    PermissionDenied,
    RegistryError,
    ResourceExhausted,
    TaskError,
    Unavailable,
    Unimplemented,
)

if TYPE_CHECKING:
    from ctrexec.containerd.client import (
        Client,
        Lease,
        Plugin,
        ServerInfo,
        ServerVersion,
    )
    from ctrexec.containerd.content import Platform
    from ctrexec.containerd.daemon import DaemonPaths, EmbeddedContainerd
    from ctrexec.containerd.execs import ExecResult
    from ctrexec.containerd.exporter import export_archive
    from ctrexec.containerd.images import (
        Image,
        ImageConfig,
        ImageSummary,
        ensure_image,
        get_image,
        list_images,
        normalize_reference,
        remove_image,
    )
    from ctrexec.containerd.importer import ImportedImage, import_archive
    from ctrexec.containerd.prune import PruneReport, image_usage, prune_images
    from ctrexec.containerd.stats import Stats
    from ctrexec.containerd.tasks import ExitStatus, Status
    from ctrexec.executor import Executor
    from ctrexec.net.netns import NetNS, NetNSInfo
    from ctrexec.registry.pull import PullEvent, ensure_pulled, pull
    from ctrexec.taskconfig import RestartPolicy, TaskConfig, TaskHandle, TaskInfo

#: Where each lazily loaded public name is defined (errors and defaults are light).
_SOURCES: dict[str, tuple[str, ...]] = {
    "ctrexec.containerd.client": (
        "Client",
        "Lease",
        "Plugin",
        "ServerInfo",
        "ServerVersion",
    ),
    "ctrexec.containerd.content": ("Platform",),
    "ctrexec.containerd.daemon": (
        "DaemonPaths",
        "EmbeddedContainerd",
    ),
    "ctrexec.containerd.execs": ("ExecResult",),
    "ctrexec.containerd.images": (
        "Image",
        "ImageConfig",
        "ImageSummary",
        "ensure_image",
        "get_image",
        "list_images",
        "normalize_reference",
        "remove_image",
    ),
    "ctrexec.containerd.exporter": ("export_archive",),
    "ctrexec.containerd.importer": ("ImportedImage", "import_archive"),
    "ctrexec.containerd.prune": ("PruneReport", "image_usage", "prune_images"),
    "ctrexec.containerd.stats": ("Stats",),
    "ctrexec.containerd.tasks": (
        "ExitStatus",
        "Status",
    ),
    "ctrexec.executor": ("Executor",),
    "ctrexec.net.netns": (
        "NetNS",
        "NetNSInfo",
    ),
    "ctrexec.registry.pull": (
        "PullEvent",
        "ensure_pulled",
        "pull",
    ),
    "ctrexec.taskconfig": (
        "RestartPolicy",
        "TaskConfig",
        "TaskHandle",
        "TaskInfo",
    ),
}
_MODULE_OF = {name: module for module, names in _SOURCES.items() for name in names}

__all__ = [
    "DEFAULT_NAMESPACE",
    "AlreadyExists",
    "CNIError",
    "Canceled",
    "Client",
    "CommandNotExecutable",
    "CommandNotFound",
    "Conflict",
    "ConnectError",
    "CtrexecError",
    "DaemonError",
    "DaemonPaths",
    "DeadlineExceeded",
    "DigestMismatch",
    "EmbeddedContainerd",
    "ExecResult",
    "Executor",
    "ExitStatus",
    "FailedPrecondition",
    "Image",
    "ImageConfig",
    "ImageSummary",
    "ImportedImage",
    "Internal",
    "InvalidArgument",
    "InvalidField",
    "Lease",
    "NetNS",
    "NetNSInfo",
    "NetworkError",
    "NotFound",
    "NotModified",
    "PermissionDenied",
    "Platform",
    "Plugin",
    "PruneReport",
    "PullEvent",
    "RegistryError",
    "ResourceExhausted",
    "RestartPolicy",
    "ServerInfo",
    "ServerVersion",
    "Stats",
    "Status",
    "TaskConfig",
    "TaskError",
    "TaskHandle",
    "TaskInfo",
    "Unavailable",
    "Unimplemented",
    "ensure_image",
    "ensure_pulled",
    "export_archive",
    "get_image",
    "image_usage",
    "import_archive",
    "list_images",
    "normalize_reference",
    "prune_images",
    "pull",
    "remove_image",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
