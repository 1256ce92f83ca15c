"""Named and anonymous volumes: directories under the state directory, docker's verbs.

A volume is ``<root>/<namespace>/<name>/_data`` (``root``: :data:`DEFAULT_VOLUME_DIR`)
with its metadata beside it in ``volume.json``; it outlives the containers that mount
it, as docker's do, until ``volume rm`` or ``volume prune``. ctrexec has no database:
which containers use a volume is read from their labels (:data:`labels.VOLUMES`), so
a volume is in use exactly while a container record names it. ``doctor``/``gc`` keep
unused volumes, as docker keeps them until a prune.

An empty volume takes the image's files at its mount point when a container that
mounts it is created (docker's copy-up, :func:`populate`), unless ``nocopy``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from ctrexec import _linux
from ctrexec import labels as lbl
from ctrexec.containerd import containers
from ctrexec.containerd.client import Client
from ctrexec.containerd.images import ImageCache
from ctrexec.defaults import DEFAULT_VOLUME_DIR
from ctrexec.errors import Conflict, InvalidArgument, NotFound
from ctrexec.oci import mounts
from ctrexec.tasks import copying
from ctrexec.tasks.copyarchive import extract_tar, write_tar
from ctrexec.tasks.spec import CheckedConfig

if TYPE_CHECKING:
    from ctrexec.paths import StrPath

_META = "volume.json"


@attrs.frozen
class Volume:
    """One volume as ``volume inspect`` shows it."""

    name: str
    mountpoint: Path
    created_at: str
    labels: Mapping[str, str]
    anonymous: bool

    def to_docker(self) -> dict[str, object]:
        """docker's ``volume inspect`` document."""
        return {
            "CreatedAt": self.created_at,
            "Driver": "local",
            "Labels": dict(self.labels) or None,
            "Mountpoint": str(self.mountpoint),
            "Name": self.name,
            "Options": None,
            "Scope": "local",
        }


def _dir(root: Path | None, namespace: str) -> Path:
    return Path(root or DEFAULT_VOLUME_DIR) / namespace


def _read(base: Path, name: str) -> Volume | None:
    try:
        meta = json.loads((base / name / _META).read_text())
    except (OSError, ValueError):
        return None
    return Volume(
        name=name,
        mountpoint=base / name / "_data",
        created_at=str(meta.get("CreatedAt", "")),
        labels=dict(meta.get("Labels") or {}),
        anonymous=bool(meta.get("Anonymous")),
    )


def create(
    namespace: str,
    name: str | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    anonymous: bool = False,
    root: Path | None = None,
) -> Volume:
    """Make a volume; a name already taken is that volume (docker's ``create``).

    No name: a random 64-hex one, as docker's anonymous volumes have. The metadata is
    written last, atomically, so a volume half made is no volume and is made again.
    """
    name = mounts.check_volume_name(name) if name is not None else secrets.token_hex(32)
    base = _dir(root, namespace)
    found = _read(base, name)
    if found is not None:
        return found
    (base / name / "_data").mkdir(parents=True, exist_ok=True, mode=0o755)
    meta = {
        "CreatedAt": datetime.now(UTC).astimezone().isoformat(timespec="seconds"),
        "Labels": dict(labels or {}),
        "Anonymous": anonymous,
    }
    tmp = base / name / f".{_META}.tmp"
    tmp.write_text(json.dumps(meta))
    tmp.replace(base / name / _META)
    return Volume(
        name, base / name / "_data", str(meta["CreatedAt"]), dict(labels or {}), anonymous
    )


def get(namespace: str, name: str, *, root: Path | None = None) -> Volume:
    """The volume called ``name``, in docker's words when there is none."""
    found = _read(_dir(root, namespace), name)
    if found is None:
        raise NotFound(f"get {name}: no such volume")
    return found


def list_volumes(namespace: str, *, root: Path | None = None) -> list[Volume]:
    """Every volume of the namespace, by name."""
    base = _dir(root, namespace)
    names = sorted(p.name for p in base.iterdir()) if base.is_dir() else []
    return [v for n in names if (v := _read(base, n)) is not None]


def users(client: Client) -> dict[str, list[str]]:
    """Which containers (ids) use each volume, from their labels."""
    found: dict[str, list[str]] = {}
    for record in containers.list_containers(client, containers.label_filter(lbl.VOLUMES)):
        for name in _names(record.labels.get(lbl.VOLUMES)):
            found.setdefault(name, []).append(record.id)
    return found


def _names(value: str | None) -> list[str]:
    return [n for n in (value or "").split(",") if n]


def remove(client: Client, name: str, *, force: bool = False, root: Path | None = None) -> None:
    """``volume rm``: refused while a container uses it, as docker's is (even forced:
    ``force`` only lets a missing volume pass)."""
    using = users(client).get(name)
    if using:
        raise Conflict(f"remove {name}: volume is in use - [{', '.join(using)}]")
    base = _dir(root, client.namespace)
    if _read(base, name) is None:
        if force:
            return
        raise NotFound(f"get {name}: no such volume")
    _delete(base, name)


def _delete(base: Path, name: str) -> None:
    """The metadata first: a removal cut short leaves no half volume that looks whole."""
    (base / name / _META).unlink(missing_ok=True)
    shutil.rmtree(base / name, ignore_errors=True)


def prune(client: Client, *, everything: bool = False, root: Path | None = None) -> list[str]:
    """Remove unused volumes: the anonymous ones, or all with ``everything`` (docker
    23's ``volume prune`` and its ``-a``). Returns the names removed."""
    using = users(client)
    base = _dir(root, client.namespace)
    gone = []
    for volume in list_volumes(client.namespace, root=root):
        if volume.name not in using and (everything or volume.anonymous):
            _delete(base, volume.name)
            gone.append(volume.name)
    return gone


@attrs.frozen
class Bound:
    """What :func:`bind_volumes` made of a config's volumes."""

    checked: CheckedConfig
    #: The record's labels: which volumes the container uses, which are its own.
    labels: Mapping[str, str]
    #: (path in the container, volume directory) of the empty volumes that the
    #: image's files at that path go into (docker's copy-up; not ``nocopy``).
    fill: tuple[tuple[str, Path], ...]


def bind_volumes(checked: CheckedConfig, namespace: str, *, root: Path | None = None) -> Bound:
    """Each VolumeMount made a bind mount of its volume's directory, the volume made
    first if it does not exist (docker's ``-v NAME:/path``), an anonymous one named."""
    bound: list[mounts.Mount] = []
    used: list[str] = []
    anonymous: list[str] = []
    fill: list[tuple[str, Path]] = []
    for m in checked.volumes:
        if isinstance(m, mounts.Mount):
            bound.append(m)
            continue
        volume = create(namespace, m.name, anonymous=m.name is None, root=root)
        used.append(volume.name)
        if m.name is None:
            anonymous.append(volume.name)
        if not m.nocopy and not any(volume.mountpoint.iterdir()):
            fill.append((m.destination, volume.mountpoint))
        bound.append(mounts.Mount.bind(str(volume.mountpoint), m.destination, readonly=m.readonly))
    found = {lbl.VOLUMES: ",".join(dict.fromkeys(used))} if used else {}
    if anonymous:
        found[lbl.ANONYMOUS_VOLUMES] = ",".join(anonymous)
    return Bound(attrs.evolve(checked, volumes=tuple(bound)), found, tuple(fill))


def populate(
    client: Client, cache: ImageCache, task_id: str, fill: Sequence[tuple[str, Path]]
) -> None:
    """docker's copy-up: the files of the new container's rootfs at each path go into
    its empty volume, with their owners and modes, and the volume's directory takes
    the path's owner and mode. Read below the rootfs (mounted read-only, privately, by
    :func:`copying.in_container_root`) and written below the volume's directory, so
    a symlink in the image leads nowhere else. A path the image lacks copies nothing."""
    if not fill:
        return

    def copy(root_fd: int) -> None:
        for dest, data in fill:
            try:
                top = _linux.path_in_root(root_fd, dest, directory=True)
            except (FileNotFoundError, NotADirectoryError):
                continue
            try:
                st = os.fstat(top)
            finally:
                os.close(top)
            with tempfile.TemporaryFile(prefix="ctrexec-volume-") as spool:
                write_tar(root_fd, dest, spool, arcname=".")
                spool.seek(0)
                volume_fd = _linux.open_root(str(data))
                try:
                    with tarfile.open(fileobj=spool, mode="r|") as tar:
                        extract_tar(volume_fd, "/", tar)
                finally:
                    os.close(volume_fd)
            os.chown(data, st.st_uid, st.st_gid)
            data.chmod(stat.S_IMODE(st.st_mode))

    copying.in_container_root(client, cache, task_id, copy, write=False, with_mounts=False)


def remove_anonymous(
    namespace: str, record_labels: Mapping[str, str], *, root: Path | None = None
) -> None:
    """The container's own anonymous volumes (``rm -v``, ``run --rm``); named ones stay."""
    base = _dir(root, namespace)
    for name in _names(record_labels.get(lbl.ANONYMOUS_VOLUMES)):
        if _read(base, name) is not None:
            _delete(base, name)


def matches(volume: Volume, filters: Sequence[str], using: Iterable[str]) -> bool:
    """docker's ``volume ls --filter``: ``dangling=true|false``, ``name=SUBSTRING``,
    ``label=KEY`` or ``label=KEY=VALUE``; every filter must hold."""
    in_use = set(using)
    for text in filters:
        key, sep, value = text.partition("=")
        if not sep:
            raise InvalidArgument(f"bad format of filter (expected name=value): {text}")
        if key == "dangling":
            if value.lower() not in ("true", "false", "1", "0"):
                raise InvalidArgument(f"invalid filter 'dangling={value}'")
            if (volume.name not in in_use) != (value.lower() in ("true", "1")):
                return False
        elif key == "name":
            if value not in volume.name:
                return False
        elif key == "label":
            k, has_value, v = value.partition("=")
            if k not in volume.labels or (has_value and volume.labels[k] != v):
                return False
        else:
            raise InvalidArgument(f"invalid filter '{key}'")
    return True


class Volumes:
    """The named volumes of a client's namespace, for a caller that manages them as
    docker's ``volume`` verbs do (the CLI's are built on it). A volume is a directory,
    not a containerd object, so the client serves only for its namespace and to find
    which containers use a volume. ``root``: where volumes live
    (:data:`ctrexec.defaults.DEFAULT_VOLUME_DIR` unless given)."""

    def __init__(self, client: Client, *, root: StrPath | None = None) -> None:
        self.client = client
        self.root = None if root is None else Path(root)

    def create(self, name: str | None = None, *, labels: Mapping[str, str] | None = None) -> Volume:
        """A name already taken is that volume (docker's ``create``); no name: a random one."""
        return create(self.client.namespace, name, labels=labels, root=self.root)

    def get(self, name: str) -> Volume:
        """NotFound, in docker's words, when there is none."""
        return get(self.client.namespace, name, root=self.root)

    def remove(self, name: str, *, force: bool = False) -> None:
        """Refused (Conflict) while a container uses it; ``force`` lets a missing one pass."""
        remove(self.client, name, force=force, root=self.root)

    def prune(self, *, everything: bool = False) -> list[str]:
        """The unused anonymous volumes (all unused with ``everything``); the names removed."""
        return prune(self.client, everything=everything, root=self.root)

    def list(self, *, filters: Sequence[str] = ()) -> list[Volume]:
        """By name; ``filters`` are docker's ``volume ls --filter`` words (``dangling=``,
        ``name=``, ``label=``), all of which must hold. Only a dangling filter reads
        which containers use a volume (a call to containerd)."""
        found = list_volumes(self.client.namespace, root=self.root)
        if not filters:
            return found
        using = users(self.client) if any(f.startswith("dangling=") for f in filters) else {}
        return [v for v in found if matches(v, filters, using)]
