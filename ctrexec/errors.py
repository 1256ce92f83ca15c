"""One error hierarchy for everything ctrexec raises.

Callers test errors by class, never by message text. gRPC statuses are mapped
onto these classes in :mod:`ctrexec._rpc`; netlink and CNI failures in their own
seams. Every translated error chains the original with ``raise ... from``.

::

    CtrexecError                     exit code 125 in the CLI
    ├── InvalidArgument              bad input, rejected before any side effect
    │   ├── InvalidField             one config field: its name, value and what was expected
    │   ├── HandleMismatch           a TaskHandle that names another container, namespace or address
    │   ├── AmbiguousPrefix          a prefix that begins several names or image IDs
    │   ├── NotATerminal             -it without a terminal on stdin: exit code 1, like docker
    │   └── UnknownCommand           a verb the CLI does not have: exit code 1, like docker
    ├── NotFound
    ├── AlreadyExists
    ├── FailedPrecondition
    │   ├── Conflict                 containerd's "...: conflict" suffix
    │   └── NotModified              containerd's "...: not modified" suffix
    ├── Unavailable                  containerd not reachable
    │   └── ConnectError             socket missing, not a socket, denied, not containerd
    ├── DeadlineExceeded
    ├── PermissionDenied
    ├── Unimplemented
    ├── Canceled
    ├── ResourceExhausted
    ├── Internal                     containerd's unknown/internal/data-loss
    ├── DigestMismatch               content's bytes do not match its digest or size
    ├── RegistryError                a registry answered with an error (HTTP status)
    │   └── RegistryRefused          an answer ctrexec will not follow (a redirect loop)
    ├── DaemonError                  the embedded containerd failed to start or stop
    ├── NetworkError                 netns, netlink and CNI failures
    │   └── CNIError                 a CNI plugin returned an error result
    └── TaskError                    a task could not be run as asked
        ├── CommandNotFound          exit code 127, like docker
        └── CommandNotExecutable     exit code 126, like docker
"""

from __future__ import annotations

#: The most of a user's value that an error quotes (its ``repr``), in characters: a
#: 10 MB hostname is named by its start and its length, not printed whole.
QUOTE_LIMIT = 120


def quoted(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)`` for an error's text, cut to ``limit`` characters with an
    ellipsis and the value's whole length when longer: the one bound on what any
    error quotes of a user's input (docker's messages cut long values too)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    if isinstance(value, str):
        whole = f"{len(value.encode(errors='surrogatepass'))} bytes"
    elif isinstance(value, bytes):
        whole = f"{len(value)} bytes"
    elif isinstance(value, tuple | list | dict):
        items = "item" if len(value) == 1 else "items"
        whole = f"{len(value)} {items}, {len(text)} characters"
    else:
        whole = f"{len(text)} characters"
    return f"{text[:limit]}… ({whole})"


class CtrexecError(Exception):
    """Root of every error ctrexec raises on purpose."""

    #: Exit code the CLI uses when this error ends a command.
    exit_code: int = 125


class InvalidArgument(CtrexecError):
    """The caller asked for something malformed; nothing was changed."""


class InvalidField(InvalidArgument):
    """One field of a config has the wrong type or an out-of-range value.

    ``field``, ``value`` and ``reason`` are kept apart so that each front end can
    name the field its own way (a group file's key, a CLI flag) without parsing
    the message. ``quoted_value`` is the value as the message quotes it, cut to the
    bound every error keeps on a user's input, for a front end's own message.
    ``conflicts_with`` names the other field when the value is refused only beside
    it, so a front end can say "conflicting options" in its own names for both.
    """

    def __init__(self, field: str, value: object, reason: str, *, conflicts_with: str = "") -> None:
        shown = list(value) if isinstance(value, tuple) else value
        self.quoted_value = quoted(shown)
        super().__init__(f"{field} = {self.quoted_value}: {reason}")
        self.field = field
        self.value = value
        self.reason = reason
        self.conflicts_with = conflicts_with


class HandleMismatch(InvalidArgument):
    """A persisted :class:`~ctrexec.TaskHandle` does not name what this executor sees:
    another containerd address or namespace, or a container of the same name made
    after the handle's was removed. Acting on it would act on someone else's task."""


class AmbiguousPrefix(InvalidArgument):
    """A word that is no exact name or ID but begins several (docker's "multiple IDs
    found"): acting on one of them would be a guess. The CLI exits as for a missing
    container where docker does (1 for the verbs on containers)."""


class NotATerminal(InvalidArgument):
    """``-i -t`` asked for, but stdin is not a terminal (docker's check, and its code)."""

    exit_code = 1


class MissingArguments(InvalidArgument):
    """A verb given fewer arguments than it needs (``ctrexec run`` alone): docker's
    ``'docker run' requires at least 1 argument.``, and its exit code 1 (a bad flag
    keeps 125, as docker's)."""

    exit_code = 1


class UnknownCommand(InvalidArgument):
    """A mistyped verb (``ctrexec sp``): docker's exit code 1, and ``hint`` (the
    closest verbs, or where the list is) for a line of its own."""

    exit_code = 1

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


class NotFound(CtrexecError):
    """The named object does not exist."""


class AlreadyExists(CtrexecError):
    """An object with that name already exists."""


class FailedPrecondition(CtrexecError):
    """The object is not in a state that allows the operation."""


class Conflict(FailedPrecondition):
    """A concurrent change or a state conflict (containerd's ``ErrConflict``)."""


class AlreadyRunning(FailedPrecondition):
    """A start of a task that runs: docker leaves such a container be and exits 0, so a
    front end must tell this refusal from the others without reading the state again
    (a second read could see the task already gone)."""


class NotModified(FailedPrecondition):
    """Nothing changed (containerd's ``ErrNotModified``)."""


class Unavailable(CtrexecError):
    """containerd or a dependency is not reachable right now."""


class ConnectError(Unavailable):
    """The containerd socket cannot be used at all: missing, wrong type, denied."""


class DeadlineExceeded(CtrexecError):
    """A call did not finish before its deadline."""


class PermissionDenied(CtrexecError):
    """The operation is not allowed for this caller."""


class Unimplemented(CtrexecError):
    """The server does not implement the call."""


class Canceled(CtrexecError):
    """The call was cancelled."""


class ResourceExhausted(CtrexecError):
    """A limit was hit (message size, quota)."""


class Internal(CtrexecError):
    """containerd reported an internal or unknown failure."""


class ShimClosed(Internal):
    """containerd's call to a task's shim was cut: the shim closed its connection
    before it answered ("ttrpc: closed"). The run ended meanwhile (its task deleted
    for a restart or a removal) or the shim died; asking again gets the answer that
    holds now."""


class DigestMismatch(CtrexecError):
    """A blob's bytes do not match the digest or size its descriptor names."""


class RegistryError(CtrexecError):
    """A registry refused or failed a request; ``status`` is the HTTP status (0: none)."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class RegistryRefused(RegistryError):
    """A registry's answer that ctrexec refuses to follow (a redirect loop, a redirect
    down from https or to a non-http URL): a retry would get the same, so a pull's
    partial downloads are not kept for one."""


class DaemonError(CtrexecError):
    """The embedded containerd could not be started or stopped cleanly."""


class NetworkError(CtrexecError):
    """A network namespace, netlink or CNI operation failed."""


class CNIError(NetworkError):
    """A CNI plugin answered with an error result.

    ``code`` and ``details`` come straight from the plugin's error JSON.
    """

    def __init__(self, message: str, *, code: int = 0, details: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.details = details


class TaskError(CtrexecError):
    """A task could not be created or started as asked."""


class CommandNotFound(TaskError):
    """The task's command does not exist in the image."""

    exit_code = 127


class CommandNotExecutable(TaskError):
    """The task's command exists but cannot be executed."""

    exit_code = 126
