"""ctrexec: run containers through containerd's API in pre-created network namespaces.

The public API is re-exported here; everything else is private to the package.
"""

from ctrexec.containerd.client import (
    DEFAULT_NAMESPACE,
    Client,
    Lease,
    Plugin,
    ServerInfo,
    ServerVersion,
)
from ctrexec.containerd.content import Platform
from ctrexec.containerd.daemon import DaemonPaths, EmbeddedContainerd
from ctrexec.containerd.execs import ExecResult
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
from ctrexec.containerd.stats import Stats
from ctrexec.containerd.tasks import ExitStatus, Status
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
    FailedPrecondition,
    Internal,
    InvalidArgument,
    InvalidField,
    NetworkError,
    NotFound,
    NotModified,
    PermissionDenied,
    ResourceExhausted,
    TaskError,
    Unavailable,
    Unimplemented,
)
from ctrexec.executor import Executor
from ctrexec.net.netns import NetNS, NetNSInfo
from ctrexec.taskconfig import RestartPolicy, TaskConfig, TaskHandle, TaskInfo

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
    "EmbeddedContainerd",
    "ExecResult",
    "Executor",
    "ExitStatus",
    "FailedPrecondition",
    "Image",
    "ImageConfig",
    "ImageSummary",
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
    "get_image",
    "list_images",
    "normalize_reference",
    "remove_image",
]
