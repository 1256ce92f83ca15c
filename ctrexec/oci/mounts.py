"""Mounts and devices: bind mounts, tmpfs, volumes, read-only root, host devices.

Docker's command-line syntax is parsed into frozen values here (``-v
SRC:DST[:MODE]``, ``--mount type=...``, ``--tmpfs DST[:OPTS]``, ``--device
HOST[:CTR][:PERMS]``), so the CLI, group files and the library share one set of
rules. A volume is a :class:`VolumeMount` here; the volume store (which owns the
directories) turns it into a bind mount.

Checks come in two steps. :func:`check_mount_source` is pure and runs when an
option is made: destinations must be absolute without ``..``, bind sources
absolute, and nothing may expose what lets a task take over the host or its
neighbours: containerd's socket and state (``/run/containerd``,
``/var/lib/containerd``, the configured socket), pinned network namespaces
(``/run/netns``), or any parent of those (``/``, ``/run``, ``/var``...).
:func:`validate_mount_sources` touches the filesystem and is for the executor
to call before any side effect: sources must exist, and the same refusals are
applied again after symlinks are resolved. ``allow_unsafe=True`` turns the
refusals off, for the rare caller that means it.
"""

from __future__ import annotations

import csv
import os
import posixpath
import re
import stat as statmod
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs

from ctrexec.errors import InvalidArgument
from ctrexec.oci._base import (
    Spec,
    SpecOpt,
    check_container_path,
    linux_of,
    mutating,
    resources_of,
)

#: Host paths no task may see by default, nor any directory that contains them.
DEFAULT_PROTECTED_PATHS: tuple[str, ...] = (
    "/run/containerd",
    "/var/lib/containerd",
    "/run/netns",
)

_PROPAGATIONS = frozenset({"private", "rprivate", "shared", "rshared", "slave", "rslave"})
_TMPFS_FLAG_PAIRS = {
    "ro": "rw",
    "exec": "noexec",
    "suid": "nosuid",
    "dev": "nodev",
    "atime": "noatime",
    "diratime": "nodiratime",
    "relatime": "norelatime",
    "strictatime": "nostrictatime",
    "sync": "async",
}
_TMPFS_FLAGS = {**_TMPFS_FLAG_PAIRS, **{v: k for k, v in _TMPFS_FLAG_PAIRS.items()}}
_TMPFS_VALUES = {
    "size": re.compile(r"^\d+[kmgKMG%]?$"),
    "nr_blocks": re.compile(r"^\d+[kmgKMG%]?$"),
    "nr_inodes": re.compile(r"^\d+[kmgKMG%]?$"),
    "mode": re.compile(r"^[0-7]{1,4}$"),
    "uid": re.compile(r"^\d+$"),
    "gid": re.compile(r"^\d+$"),
}
#: Docker's tmpfs defaults; a user option such as ``exec`` overrides its opposite.
TMPFS_DEFAULT_OPTIONS: tuple[str, ...] = ("nosuid", "nodev", "noexec")

_DEVICE_PERMS = re.compile(r"^[rwm]{1,3}$")


@attrs.frozen
class Mount:
    """One OCI mount: where, what kind, from where, and how."""

    destination: str
    type: str
    source: str
    options: tuple[str, ...] = ()

    @classmethod
    def bind(
        cls, source: str, destination: str, *, readonly: bool = False, propagation: str = "rprivate"
    ) -> Mount:
        """A recursive bind mount of host ``source`` at ``destination``."""
        if propagation not in _PROPAGATIONS:
            raise InvalidArgument(f"unknown mount propagation {propagation!r}")
        src = _check_host_path(source, "bind mount source")
        dst = _check_destination(destination)
        return cls(dst, "bind", src, ("rbind", propagation, "ro" if readonly else "rw"))

    @classmethod
    def tmpfs(cls, destination: str, options: Iterable[str] = ()) -> Mount:
        """A tmpfs at ``destination`` with docker's defaults plus ``options``."""
        return cls(_check_destination(destination), "tmpfs", "tmpfs", _tmpfs_options(options))

    @property
    def is_bind(self) -> bool:
        """Whether the source is a host path (a bind mount)."""
        return self.type == "bind" or "bind" in self.options or "rbind" in self.options

    def to_oci(self) -> dict[str, Any]:
        """The mount as an entry of the spec's ``mounts`` list."""
        return {
            "destination": self.destination,
            "type": self.type,
            "source": self.source,
            "options": list(self.options),
        }


@attrs.frozen
class Device:
    """A host device to expose: host path, path in the container, cgroup access."""

    host_path: str
    container_path: str
    permissions: str = "rwm"


def _check_destination(destination: str) -> str:
    dst = check_container_path(destination, "mount destination")
    if dst == "/":
        raise InvalidArgument("mount destination must not be '/'")
    return dst


def _check_host_path(path: str, what: str) -> str:
    if not isinstance(path, str) or not path:
        raise InvalidArgument(f"{what} must be a non-empty string")
    if not path.startswith("/"):
        raise InvalidArgument(f"{what} {path!r} must be an absolute host path")
    return check_container_path(path, what)


def _tmpfs_options(options: Iterable[str]) -> tuple[str, ...]:
    if isinstance(options, str):
        raise InvalidArgument("tmpfs options must be a list, not one string")
    result = list(TMPFS_DEFAULT_OPTIONS)
    for option in options:
        key, sep, value = option.partition("=")
        if sep:
            pattern = _TMPFS_VALUES.get(key)
            if pattern is None or not pattern.match(value):
                raise InvalidArgument(f"invalid tmpfs option {option!r}")
            result = [o for o in result if not o.startswith(f"{key}=")]
        elif option in _TMPFS_FLAGS:
            result = [o for o in result if o not in (option, _TMPFS_FLAGS[option])]
        else:
            raise InvalidArgument(f"invalid tmpfs option {option!r}")
        result.append(option)
    return tuple(result)


@attrs.frozen
class VolumeMount:
    """A volume at ``destination``: named, or anonymous (``name`` None, given a random
    name when the task is created). The volume store turns it into a bind mount of
    the volume's directory; ``nocopy`` skips the copy of the image's files into it."""

    name: str | None
    destination: str
    readonly: bool = False
    nocopy: bool = False


#: Docker's rule for a local volume's name; anything else in a ``-v`` source that is
#: not an absolute path is an error (docker's words).
VOLUME_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$")


def check_volume_name(name: str) -> str:
    """Refuse what docker refuses as a local volume's name."""
    if not isinstance(name, str) or not VOLUME_NAME.match(name):
        raise InvalidArgument(
            f'"{name}" includes invalid characters for a local volume name, only '
            '"[a-zA-Z0-9][a-zA-Z0-9_.-]" are allowed. If you intended to pass a host '
            "directory, use absolute path"
        )
    return name


def parse_volume(text: str) -> Mount | VolumeMount:
    """Parse docker's ``-v SRC:DST[:MODE]``, ``-v NAME:DST[:MODE]`` and ``-v DST``.

    A source that starts with ``/`` is a host path (a bind mount, MODE: ``ro``/``rw``
    and a propagation); anything else is a volume's name (MODE: ``ro``/``rw`` and
    ``nocopy``), as docker tells them apart; one path alone is an anonymous volume.
    """
    parts = text.split(":") if isinstance(text, str) else []
    if len(parts) == 1 and parts[0]:
        return VolumeMount(None, _check_destination(parts[0]))
    if len(parts) not in (2, 3):
        raise InvalidArgument(f"invalid volume {text!r} (expected SRC:DST[:ro|rw])")
    named = not parts[0].startswith("/")
    readonly, propagation, nocopy = False, "rprivate", False
    seen_rw = seen_prop = False
    for mode in parts[2].split(",") if len(parts) == 3 else []:
        if mode in ("ro", "rw") and not seen_rw:
            readonly, seen_rw = mode == "ro", True
        elif mode in _PROPAGATIONS and not seen_prop and not named:
            propagation, seen_prop = mode, True
        elif mode == "nocopy" and named and not nocopy:
            nocopy = True
        else:
            raise InvalidArgument(f"invalid volume mode {mode!r} in {text!r}")
    if named:
        name = check_volume_name(parts[0])
        return VolumeMount(name, _check_destination(parts[1]), readonly, nocopy)
    return Mount.bind(parts[0], parts[1], readonly=readonly, propagation=propagation)


_MOUNT_TYPES = ("bind", "volume", "tmpfs")
_MOUNT_FLAGS = ("readonly", "ro", "volume-nocopy", "bind-nonrecursive")
_MOUNT_KEYS = frozenset(
    {"type", "source", "src", "target", "dst", "destination", "bind-propagation",
     "tmpfs-size", "tmpfs-mode", *_MOUNT_FLAGS}
)  # fmt: skip
_BOOLS = {"true": True, "1": True, "false": False, "0": False}


def _mount_fields(text: str) -> dict[str, str]:
    """docker's CSV of ``key=value`` fields, with its errors; later keys win."""
    if not isinstance(text, str) or not text:
        raise InvalidArgument("invalid mount: expected type=...,target=...")
    try:
        row = next(csv.reader([text]))
    except csv.Error as exc:
        raise InvalidArgument(f"invalid mount {text!r}: {exc}") from exc
    found: dict[str, str] = {}
    for item in row:
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep and key not in _MOUNT_FLAGS:
            raise InvalidArgument(f"invalid field '{item}' must be a key=value pair")
        if key not in _MOUNT_KEYS:
            raise InvalidArgument(f"unexpected key '{key}' in '{item}'")
        if key in _MOUNT_FLAGS:
            if sep and value.lower() not in _BOOLS:
                raise InvalidArgument(f"invalid value for {key}: {value}")
            value = "true" if not sep else str(_BOOLS[value.lower()]).lower()
        found[{"src": "source", "dst": "target", "destination": "target", "ro": "readonly"}
              .get(key, key)] = value  # fmt: skip
    return found


def _refuse_mixed(kind: str, found: Mapping[str, str]) -> None:
    for key in found:
        prefix = key.split("-", 1)[0]
        if "-" in key and prefix in _MOUNT_TYPES and prefix != kind:
            raise InvalidArgument(f"cannot mix '{prefix}-*' options with mount type '{kind}'")


def _config_error(kind: str, why: str) -> InvalidArgument:
    return InvalidArgument(f'invalid mount config for type "{kind}": {why}')


def parse_mount(text: str) -> Mount | VolumeMount:
    """Parse docker's ``--mount type=bind|volume|tmpfs,source=,target=,...``.

    The type defaults to ``volume``, as docker's does; a volume without a source is
    anonymous. Errors are docker's (``invalid field``, ``target is required``...);
    that a bind source exists is checked with the host (``validate_mount_sources``).
    """
    found = _mount_fields(text)
    kind = found.get("type", "volume")
    if kind not in _MOUNT_TYPES:
        raise InvalidArgument(f"invalid mount type {kind!r} (bind, volume or tmpfs)")
    _refuse_mixed(kind, found)
    target = found.get("target")
    if not target:
        raise InvalidArgument("target is required")
    readonly = found.get("readonly") == "true"
    source = found.get("source", "")
    if kind == "tmpfs":
        if source:
            raise _config_error("tmpfs", "field Source must not be specified")
        if readonly:
            raise _config_error("tmpfs", "field ReadOnly must not be specified")
        opts = [f"size={found['tmpfs-size']}"] if "tmpfs-size" in found else []
        opts += [f"mode={found['tmpfs-mode']}"] if "tmpfs-mode" in found else []
        return Mount.tmpfs(target, opts)
    if kind == "volume":
        name = check_volume_name(source) if source else None
        nocopy = found.get("volume-nocopy") == "true"
        return VolumeMount(name, _check_destination(target), readonly, nocopy)
    if not source:
        raise _config_error("bind", "field Source must not be empty")
    propagation = found.get("bind-propagation", "rprivate")
    mount = Mount.bind(source, target, readonly=readonly, propagation=propagation)
    if found.get("bind-nonrecursive") == "true":
        mount = attrs.evolve(mount, options=("bind", *mount.options[1:]))
    return mount


def parse_tmpfs(text: str) -> Mount:
    """Parse docker's ``--tmpfs DST[:OPT,OPT...]``."""
    if not isinstance(text, str):
        raise InvalidArgument(f"invalid tmpfs {text!r}")
    destination, _, opts = text.partition(":")
    return Mount.tmpfs(destination, [o for o in opts.split(",") if o] if opts else [])


def parse_device(text: str) -> Device:
    """Parse docker's ``--device HOST[:CONTAINER][:PERMS]`` (PERMS from ``rwm``)."""
    parts = text.split(":") if isinstance(text, str) else []
    if not 1 <= len(parts) <= 3:
        raise InvalidArgument(f"invalid device {text!r} (expected HOST[:CONTAINER][:PERMS])")
    host = parts[0]
    container, perms = host, "rwm"
    if len(parts) == 2:
        if _DEVICE_PERMS.match(parts[1]):
            perms = parts[1]
        else:
            container = parts[1]
    elif len(parts) == 3:
        container, perms = parts[1], parts[2]
    if not _DEVICE_PERMS.match(perms):
        raise InvalidArgument(f"invalid device permissions {perms!r} (letters from 'rwm')")
    return Device(
        _check_host_path(host, "device path"),
        check_container_path(container, "device path in the container"),
        perms,
    )


def _socket_path(address: str) -> str:
    return address.removeprefix("unix://")


def _overlaps(path: str, protected: str) -> bool:
    """True if ``path`` is ``protected``, inside it, or one of its parents."""
    if path in (protected, "/"):
        return True
    return protected.startswith(path + "/") or path.startswith(protected + "/")


def check_mount_source(
    source: str,
    *,
    allow_unsafe: bool = False,
    containerd_address: str | None = None,
    protected: Sequence[str] = DEFAULT_PROTECTED_PATHS,
) -> None:
    """Refuse a bind source that would expose containerd or the pinned namespaces.

    Lexical only; :func:`validate_mount_sources` repeats it on the real path.
    """
    if allow_unsafe:
        return
    path = "/" + posixpath.normpath(source).lstrip("/")
    guarded = list(protected)
    if containerd_address:
        guarded.append(_socket_path(containerd_address))
    for guard in guarded:
        norm = "/" + posixpath.normpath(guard).lstrip("/")
        if _overlaps(path, norm):
            raise InvalidArgument(
                f"refusing to mount {source!r}: it exposes {norm} (pass allow_unsafe to override)"
            )


def validate_mount_sources(
    mounts: Iterable[Mount | Mapping[str, Any]],
    *,
    allow_unsafe: bool = False,
    containerd_address: str | None = None,
    protected: Sequence[str] = DEFAULT_PROTECTED_PATHS,
) -> None:
    """Check every bind source on the host: it must exist and be safe once resolved.

    Pass ``Mount`` values or a spec's ``mounts`` list; non-bind mounts are skipped.
    Symlinks are resolved on the host before the safety check, so a link such as
    ``/tmp/x -> /run/containerd`` is refused like the real path.
    """
    guarded = list(dict.fromkeys([*protected, *(os.path.realpath(p) for p in protected)]))
    if containerd_address:
        socket = _socket_path(containerd_address)
        guarded += [socket, os.path.realpath(socket)]
    for mount in mounts:
        value = (
            mount
            if isinstance(mount, Mount)
            else Mount(
                str(mount.get("destination", "")),
                str(mount.get("type", "")),
                str(mount.get("source", "")),
                tuple(mount.get("options") or ()),
            )
        )
        if not value.is_bind:
            continue
        source = _check_host_path(value.source, "bind mount source")
        if not os.path.lexists(source):
            raise InvalidArgument(f"bind source path does not exist: {source}")
        real = os.path.realpath(source)
        if not Path(real).exists():
            raise InvalidArgument(f"bind mount source {source!r} is a dangling symlink")
        for candidate in (source, real):
            check_mount_source(
                candidate,
                allow_unsafe=allow_unsafe,
                protected=guarded,
            )


def with_mount(
    mount: Mount, *, allow_unsafe: bool = False, containerd_address: str | None = None
) -> SpecOpt:
    """Add ``mount``, replacing any mount at the same destination (e.g. /dev/shm)."""
    if not isinstance(mount, Mount):
        raise InvalidArgument(f"expected a Mount, got {type(mount).__name__}")
    if mount.is_bind:
        check_mount_source(
            mount.source, allow_unsafe=allow_unsafe, containerd_address=containerd_address
        )
    entry = mount.to_oci()

    def apply(spec: Spec) -> None:
        kept = [m for m in spec.get("mounts") or [] if m.get("destination") != mount.destination]
        spec["mounts"] = [*kept, dict(entry, options=list(entry["options"]))]

    return mutating(apply)


def with_mounts(
    mounts: Iterable[Mount], *, allow_unsafe: bool = False, containerd_address: str | None = None
) -> SpecOpt:
    """Add several mounts in order (see :func:`with_mount`)."""
    opts = [
        with_mount(m, allow_unsafe=allow_unsafe, containerd_address=containerd_address)
        for m in mounts
    ]

    def option(spec: Spec) -> Spec:
        for opt in opts:
            spec = opt(spec)
        return spec

    return option


def with_bind_mount(
    source: str,
    destination: str,
    readonly: bool = False,
    *,
    propagation: str = "rprivate",
    allow_unsafe: bool = False,
    containerd_address: str | None = None,
) -> SpecOpt:
    """Bind host ``source`` at ``destination`` (``-v SRC:DST[:ro]``)."""
    mount = Mount.bind(source, destination, readonly=readonly, propagation=propagation)
    return with_mount(mount, allow_unsafe=allow_unsafe, containerd_address=containerd_address)


def with_tmpfs(destination: str, options: Iterable[str] = ()) -> SpecOpt:
    """Mount a tmpfs at ``destination`` (``--tmpfs DST:OPTS``)."""
    return with_mount(Mount.tmpfs(destination, options))


#: Where the task's shared memory is, a tmpfs of the default spec's.
SHM_PATH = "/dev/shm"


def with_shm_size(size: int) -> SpecOpt:
    """``--shm-size``: the ``/dev/shm`` tmpfs's size in bytes, its other options kept."""
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise InvalidArgument(f"shm size must be a positive number of bytes, got {size!r}")

    def apply(spec: Spec) -> None:
        for mount in spec.get("mounts") or []:
            if mount.get("destination") == SHM_PATH:
                kept = [o for o in mount.get("options") or [] if not o.startswith("size=")]
                mount["options"] = [*kept, f"size={size}"]
                return
        raise InvalidArgument(f"the spec has no {SHM_PATH} mount to size")

    return mutating(apply)


def with_readonly_rootfs(readonly: bool = True) -> SpecOpt:
    """Make the root filesystem read-only; writable mounts still work."""

    def apply(spec: Spec) -> None:
        spec.setdefault("root", {"path": "rootfs"})["readonly"] = bool(readonly)

    return mutating(apply)


class StatResult(Protocol):
    """What :func:`with_devices` needs from ``os.stat`` (so tests can fake it)."""

    @property
    def st_mode(self) -> int: ...
    @property
    def st_rdev(self) -> int: ...
    @property
    def st_uid(self) -> int: ...
    @property
    def st_gid(self) -> int: ...


def _device_entries(
    device: Device, stat: Callable[[str], StatResult]
) -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        info = stat(device.host_path)
    except OSError as exc:
        raise InvalidArgument(f"cannot use device {device.host_path!r}: {exc.strerror}") from exc
    if statmod.S_ISCHR(info.st_mode):
        kind = "c"
    elif statmod.S_ISBLK(info.st_mode):
        kind = "b"
    else:
        raise InvalidArgument(f"{device.host_path!r} is not a character or block device")
    major, minor = os.major(info.st_rdev), os.minor(info.st_rdev)
    node = {
        "path": device.container_path,
        "type": kind,
        "major": major,
        "minor": minor,
        "fileMode": statmod.S_IMODE(info.st_mode),
        "uid": info.st_uid,
        "gid": info.st_gid,
    }
    rule = {
        "allow": True,
        "type": kind,
        "major": major,
        "minor": minor,
        "access": device.permissions,
    }
    return node, rule


def with_devices(
    devices: Iterable[str | Device], *, stat: Callable[[str], StatResult] = os.stat
) -> SpecOpt:
    """Expose host devices (``--device``): a node in /dev and a cgroup allow rule.

    The host device is looked at when the option is made, through ``stat``
    (``os.stat`` by default; tests pass a fake).
    """
    if isinstance(devices, str):
        raise InvalidArgument("devices must be a list, not one string")
    parsed = [d if isinstance(d, Device) else parse_device(d) for d in devices]
    entries = [_device_entries(d, stat) for d in parsed]

    def apply(spec: Spec) -> None:
        linux = linux_of(spec)
        paths = {node["path"] for node, _ in entries}
        nodes = [d for d in linux.get("devices") or [] if d.get("path") not in paths]
        linux["devices"] = nodes + [dict(node) for node, _ in entries]
        rules = resources_of(spec).setdefault("devices", [])
        rules.extend(dict(rule) for _, rule in entries)

    return mutating(apply)
