"""ctrexec: run containers through containerd's API in pre-created network namespaces.

The public API is re-exported here; everything else is private to the package.
"""

from ctrexec.client import DEFAULT_NAMESPACE, Client, Lease, Plugin, ServerInfo, ServerVersion
from ctrexec.daemon import DaemonPaths, EmbeddedContainerd
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
    NetworkError,
    NotFound,
    NotModified,
    PermissionDenied,
    ResourceExhausted,
    TaskError,
    Unavailable,
    Unimplemented,
)

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
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "Lease",
    "NetworkError",
    "NotFound",
    "NotModified",
    "PermissionDenied",
    "Plugin",
    "ResourceExhausted",
    "ServerInfo",
    "ServerVersion",
    "TaskError",
    "Unavailable",
    "Unimplemented",
]
