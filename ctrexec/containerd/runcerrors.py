"""runc's create failures that name one of the user's settings, in the user's words.

A task whose working directory or mount runc cannot make fails in Tasks.Create with
containerd's and runc's layers of wrapping (``failed to create shim task: OCI runtime
create failed: runc create failed: unable to start container process: error during
container init: mkdir /etc/passwd: not a directory: unknown``): the names of
components the user never chose. :func:`translate` keeps what the user can act on
(which setting, which path, the system's reason) and leaves the rest to the cause the
caller chains (``raise ... from``), for a library caller and logs to read.

Exit codes follow docker's meaning of them: 125 for a setting the container cannot
be made with, 126 when the command cannot be started from its working directory
(``permission denied``, as docker's CLI gives). A command that is not found or not
executable is :func:`ctrexec.containerd.tasks.command_error`'s.
"""

from __future__ import annotations

import re

from ctrexec import errors

#: The wrapping containerd and runc put before runc's own reason, outermost first; a
#: message carrying any of them is a create's failure.
_WRAPPERS = (
    "failed to create shim task: ",
    "OCI runtime create failed: ",
    "runc create failed: ",
    "unable to start container process: ",
    "error during container init: ",
)
#: runc 1.1 creates the working directory (``os.MkdirAll``) after the mounts: a
#: ``mkdir`` failure outside a mount's is the working directory's.
_CWD_MKDIR = re.compile(r"^mkdir (?P<path>.+?): (?P<reason>[^:]+)$")
#: Entering it as the task's user, once made (``chdir to cwd ("/x") set in config.json
#: failed: permission denied``).
_CWD_CHDIR = re.compile(
    r'^chdir to cwd \("(?P<path>.*)"\) set in config\.json failed: (?P<reason>.+)$'
)
#: A mount (``-v``, ``--mount``, ``--tmpfs``): ``error mounting "SRC" to rootfs at "DST": ...``.
_MOUNT = re.compile(
    r'^error mounting "(?P<source>.*?)" to rootfs at "(?P<target>.*?)": (?P<rest>.+)$'
)
#: A path in the container's bundle (``/var/lib/.../<id>/rootfs/proc``), as the user
#: names it: from the container's root.
_ROOTFS_PATH = re.compile(r'"?/\S*?/rootfs(?P<inner>/\S*?)"?(?=[\s:]|$)')
#: containerd's code for an error it did not classify, at the end.
_NOISE = (": unknown", ": internal")


def runc_detail(message: str) -> str | None:
    """runc's own reason inside a create's failure; None for another message."""
    if not any(w in message for w in _WRAPPERS[:2]):
        return None
    detail = message
    for wrapper in _WRAPPERS:
        at = detail.find(wrapper)
        if at >= 0:
            detail = detail[at + len(wrapper) :]
    for noise in _NOISE:
        detail = detail.removesuffix(noise)
    return detail


def translate(exc: errors.CtrexecError) -> errors.CtrexecError | None:
    """The user's error for a create that runc refused over one of their settings; None
    when the message is not one (the caller keeps its own)."""
    detail = runc_detail(str(exc))
    if detail is None:
        return None
    if match := _MOUNT.match(detail):
        reason = _inside(match["rest"].rsplit(": ", 1)[-1])
        return errors.TaskError(
            f"cannot mount {errors.quoted(match['source'])} at {errors.quoted(match['target'])} "
            f"in the container: {reason}"
        )
    if match := _CWD_CHDIR.match(detail):
        reason = match["reason"]
        kind = errors.CommandNotExecutable if "permission denied" in reason else errors.TaskError
        return kind(f"cannot enter the working directory {errors.quoted(match['path'])}: {reason}")
    if match := _CWD_MKDIR.match(detail):
        return errors.TaskError(
            "cannot make the working directory in the container: "
            f"{errors.quoted(match['path'])}: {match['reason']}"
        )
    return None


def _inside(text: str) -> str:
    """``text`` with paths into the bundle's rootfs shown from the container's root."""
    return _ROOTFS_PATH.sub(lambda m: errors.quoted(m["inner"]), text)
