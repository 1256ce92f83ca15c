"""Snapshots: layer chains, container root filesystems, and reading files from them.

Snapshots are per namespace and per snapshotter. A committed snapshot is named by
the chain ID of the layers below and including it; a container's root filesystem is
an active snapshot prepared on top of the image's last chain ID.

Create snapshots under a lease (``lease=``): containerd collects any snapshot that no
lease, container or GC label references, sometimes before the caller's next call.

:func:`read_files` mounts a snapshot's mounts in a mount namespace private to one
short-lived thread (:func:`ctrexec._linux.in_private_mount_namespace`), so the mount
is never visible on the host and disappears with the thread even if ctrexec is
killed halfway; the files are read through the one root-confined reader,
:func:`ctrexec._linux.read_in_root`.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path

import attrs
from google.protobuf import empty_pb2

from ctrexec import _linux, _rpc, errors
from ctrexec._api.containerd.services.diff.v1 import diff_pb2
from ctrexec._api.containerd.services.snapshots.v1 import snapshots_pb2
from ctrexec._api.containerd.types import mount_pb2
from ctrexec.containerd._proto import from_timestamp
from ctrexec.containerd.client import Client
from ctrexec.containerd.content import DATA_TIMEOUT, Descriptor, layer_compression

DEFAULT_SNAPSHOTTER = "overlayfs"
_KINDS = {
    snapshots_pb2.VIEW: "view",
    snapshots_pb2.ACTIVE: "active",
    snapshots_pb2.COMMITTED: "committed",
}


@attrs.frozen
class RootfsMount:
    """One mount containerd hands out for a snapshot (type, source, options)."""

    type: str
    source: str
    target: str = ""
    options: tuple[str, ...] = ()

    @classmethod
    def from_proto(cls, msg: mount_pb2.Mount) -> RootfsMount:
        return cls(msg.type, msg.source, msg.target, tuple(msg.options))

    def to_proto(self) -> mount_pb2.Mount:
        return mount_pb2.Mount(
            type=self.type, source=self.source, target=self.target, options=list(self.options)
        )


@attrs.frozen
class SnapshotInfo:
    name: str
    parent: str
    kind: str  # "view", "active" or "committed"
    labels: Mapping[str, str]
    created: datetime | None


def chain_ids(diff_ids: Sequence[str]) -> tuple[str, ...]:
    """OCI chain IDs: chain[0] = diff[0]; chain[n] = sha256(chain[n-1] + " " + diff[n])."""
    out: list[str] = []
    for diff_id in diff_ids:
        if not out:
            out.append(diff_id)
        else:
            text = f"{out[-1]} {diff_id}".encode()
            out.append("sha256:" + hashlib.sha256(text).hexdigest())
    return tuple(out)


def _mounts(msgs: Iterable[mount_pb2.Mount]) -> list[RootfsMount]:
    return [RootfsMount.from_proto(m) for m in msgs]


# -- the Snapshots service --------------------------------------------------------------


def stat_snapshot(client: Client, key: str, snapshotter: str) -> SnapshotInfo | None:
    """The snapshot named ``key``, or None when there is none."""
    resp = client._call_or_none(
        _rpc.SNAPSHOTS,
        "Stat",
        snapshots_pb2.StatSnapshotRequest(snapshotter=snapshotter, key=key),
        snapshots_pb2.StatSnapshotResponse,
    )
    if resp is None:
        return None
    return _info(resp.info)


def _info(i: snapshots_pb2.Info) -> SnapshotInfo:
    return SnapshotInfo(
        i.name,
        i.parent,
        _KINDS.get(i.kind, "unknown"),
        dict(i.labels),
        from_timestamp(i.created_at),
    )


def list_snapshots(client: Client, snapshotter: str = DEFAULT_SNAPSHOTTER) -> list[SnapshotInfo]:
    """Every snapshot of the namespace in ``snapshotter`` (what doctor judges)."""
    stream = client._connection.server_stream(
        _rpc.SNAPSHOTS,
        "List",
        snapshots_pb2.ListSnapshotsRequest(snapshotter=snapshotter),
        snapshots_pb2.ListSnapshotsResponse,
        namespace=client.namespace,
    )
    return [_info(i) for page in stream for i in page.info]


def snapshot_usage(client: Client, key: str, snapshotter: str = DEFAULT_SNAPSHOTTER) -> int:
    """The bytes a snapshot uses on its own (docker's container size); 0 once it is gone."""
    resp = client._call_or_none(
        _rpc.SNAPSHOTS,
        "Usage",
        snapshots_pb2.UsageRequest(snapshotter=snapshotter, key=key),
        snapshots_pb2.UsageResponse,
    )
    return 0 if resp is None else int(resp.size)


def prepare_rootfs(
    client: Client,
    key: str,
    parent_chain_id: str,
    *,
    snapshotter: str = DEFAULT_SNAPSHOTTER,
    lease: str | None,
    labels: Mapping[str, str] | None = None,
) -> list[RootfsMount]:
    """A writable (active) snapshot on top of ``parent_chain_id``; its mounts."""
    resp = client._call(
        _rpc.SNAPSHOTS,
        "Prepare",
        snapshots_pb2.PrepareSnapshotRequest(
            snapshotter=snapshotter, key=key, parent=parent_chain_id, labels=dict(labels or {})
        ),
        snapshots_pb2.PrepareSnapshotResponse,
        lease=lease,
    )
    return _mounts(resp.mounts)


def view_snapshot(
    client: Client, key: str, parent: str, *, snapshotter: str, lease: str | None
) -> list[RootfsMount]:
    """A read-only view of the committed snapshot ``parent``; its mounts."""
    resp = client._call(
        _rpc.SNAPSHOTS,
        "View",
        snapshots_pb2.ViewSnapshotRequest(snapshotter=snapshotter, key=key, parent=parent),
        snapshots_pb2.ViewSnapshotResponse,
        lease=lease,
    )
    return _mounts(resp.mounts)


def snapshot_mounts(
    client: Client, key: str, snapshotter: str = DEFAULT_SNAPSHOTTER
) -> list[RootfsMount]:
    resp = client._call(
        _rpc.SNAPSHOTS,
        "Mounts",
        snapshots_pb2.MountsRequest(snapshotter=snapshotter, key=key),
        snapshots_pb2.MountsResponse,
    )
    return _mounts(resp.mounts)


def commit_snapshot(
    client: Client, name: str, key: str, *, snapshotter: str, lease: str | None
) -> None:
    client._call(
        _rpc.SNAPSHOTS,
        "Commit",
        snapshots_pb2.CommitSnapshotRequest(snapshotter=snapshotter, name=name, key=key),
        empty_pb2.Empty,
        lease=lease,
    )


def remove_snapshot(client: Client, key: str, snapshotter: str = DEFAULT_SNAPSHOTTER) -> None:
    """Remove a snapshot; one that is already gone is fine."""
    with contextlib.suppress(errors.NotFound):
        client._call(
            _rpc.SNAPSHOTS,
            "Remove",
            snapshots_pb2.RemoveSnapshotRequest(snapshotter=snapshotter, key=key),
            empty_pb2.Empty,
        )


# -- unpacking layers ------------------------------------------------------------------


def is_committed(client: Client, name: str, snapshotter: str) -> bool:
    """True when ``name`` is a committed snapshot; FailedPrecondition when it is an
    active or view snapshot (a key, not a layer)."""
    found = stat_snapshot(client, name, snapshotter)
    if found is not None and found.kind != "committed":
        raise errors.FailedPrecondition(
            f"snapshot {name} exists in {snapshotter} but is {found.kind}, not committed"
        )
    return found is not None


def check_layers(layers: Sequence[Descriptor], diff_ids: Sequence[str]) -> None:
    """Refuse, before anything is fetched or applied, an image whose layers Diff.Apply
    cannot apply or whose config does not name one diff ID per layer."""
    if len(layers) != len(diff_ids):
        raise errors.InvalidArgument(f"image has {len(layers)} layers but {len(diff_ids)} diff_ids")
    for layer in layers:
        layer_compression(layer.media_type)


def unpack_layers(
    client: Client,
    layers: Sequence[Descriptor],
    diff_ids: Sequence[str],
    *,
    snapshotter: str = DEFAULT_SNAPSHOTTER,
    lease: str,
    timeout: float = DATA_TIMEOUT,
) -> str:
    """Apply each missing layer as a committed snapshot named by its chain ID.

    Returns the top chain ID ("" for an image without layers). Layers already
    committed are skipped; losing a race to a concurrent unpack is fine.
    """
    check_layers(layers, diff_ids)
    parent = ""
    for layer, diff_id, chain_id in zip(layers, diff_ids, chain_ids(diff_ids), strict=True):
        if not is_committed(client, chain_id, snapshotter):
            apply_layer(
                client,
                layer,
                diff_id=diff_id,
                chain_id=chain_id,
                parent=parent,
                snapshotter=snapshotter,
                lease=lease,
                timeout=timeout,
            )
        parent = chain_id
    return parent


def apply_layer(
    client: Client,
    layer: Descriptor,
    *,
    diff_id: str,
    chain_id: str,
    parent: str,
    snapshotter: str,
    lease: str,
    timeout: float = DATA_TIMEOUT,
) -> None:
    """One layer, whose blob is in the content store, onto the committed ``parent``:
    Prepare, Diff.Apply, Commit as ``chain_id``. The active snapshot is removed when
    any step fails; a concurrent unpack that committed ``chain_id`` first wins."""
    # containerd's own unpack key format: "extract-<unique> <chain id>".
    key = f"extract-{secrets.token_hex(8)} {chain_id}"
    try:
        mounts = prepare_rootfs(client, key, parent, snapshotter=snapshotter, lease=lease)
    except errors.AlreadyExists:
        if is_committed(client, chain_id, snapshotter):
            return
        raise
    try:
        _apply(client, layer, mounts, diff_id=diff_id, lease=lease, timeout=timeout)
        try:
            commit_snapshot(client, chain_id, key, snapshotter=snapshotter, lease=lease)
        except errors.AlreadyExists:
            remove_snapshot(client, key, snapshotter)  # a concurrent unpack won
    except BaseException:
        with contextlib.suppress(errors.CtrexecError):
            remove_snapshot(client, key, snapshotter)
        raise


def _apply(
    client: Client,
    layer: Descriptor,
    mounts: Sequence[RootfsMount],
    *,
    diff_id: str,
    lease: str,
    timeout: float,
) -> None:
    resp = client._call(
        _rpc.DIFF,
        "Apply",
        diff_pb2.ApplyRequest(diff=layer.to_proto(), mounts=[m.to_proto() for m in mounts]),
        diff_pb2.ApplyResponse,
        lease=lease,
        timeout=timeout,
    )
    if resp.applied.digest != diff_id:
        raise errors.Internal(
            f"layer {layer.digest} unpacked to {resp.applied.digest or '?'}, "
            f"but the image config says {diff_id}"
        )


def diff_mounts(
    client: Client,
    lower: Sequence[RootfsMount],
    upper: Sequence[RootfsMount],
    *,
    media_type: str,
    ref: str,
    lease: str,
) -> Descriptor:
    """Diff.Diff: what changed from ``lower`` to ``upper``, as a layer blob containerd
    writes into the content store under ``lease`` (with its ``containerd.io/uncompressed``
    label, the layer's diff ID). ``ref``: the ingest's name, unique per call."""
    resp = client._call(
        _rpc.DIFF,
        "Diff",
        diff_pb2.DiffRequest(
            left=[m.to_proto() for m in lower],
            right=[m.to_proto() for m in upper],
            media_type=media_type,
            ref=ref,
        ),
        diff_pb2.DiffResponse,
        lease=lease,
        timeout=DATA_TIMEOUT,
    )
    return Descriptor.from_proto(resp.diff)


# -- reading files of a snapshot ----------------------------------------------------------


def check_paths(paths: Iterable[str]) -> list[str]:
    checked = list(paths)
    for p in checked:
        if not isinstance(p, str) or not p or "\0" in p:
            raise errors.InvalidArgument(f"invalid path {p!r}")
    return checked


def read_files(
    mounts: Sequence[RootfsMount], paths: Iterable[str], *, max_bytes: int = _linux.MAX_FILE_BYTES
) -> dict[str, bytes | None]:
    """Mount ``mounts`` read-only in a private namespace and read ``paths`` inside them."""
    wanted = check_paths(paths)
    tmp = tempfile.mkdtemp(prefix="ctrexec-rootfs-")

    def work() -> dict[str, bytes | None]:
        _linux.mount_readonly(mounts, tmp)
        try:
            return _linux.read_in_root(tmp, wanted, max_bytes=max_bytes)
        finally:
            _linux.unmount_all_at(tmp)

    try:
        return _linux.in_private_mount_namespace(work)
    finally:
        with contextlib.suppress(OSError):
            Path(tmp).rmdir()


def read_snapshot_files(
    client: Client,
    parent: str,
    paths: Iterable[str],
    *,
    snapshotter: str = DEFAULT_SNAPSHOTTER,
    max_bytes: int = _linux.MAX_FILE_BYTES,
) -> dict[str, bytes | None]:
    """Read files of the committed snapshot ``parent`` through a temporary view.

    The view snapshot (under a lease) and the private read-only mount are gone when
    this returns, whatever happened. NotFound when ``parent`` does not exist.
    """
    wanted = check_paths(paths)
    key = f"ctrexec-view-{secrets.token_hex(8)}"
    with client.lease() as lease:
        mounts = view_snapshot(client, key, parent, snapshotter=snapshotter, lease=lease.id)
        try:
            return read_files(mounts, wanted, max_bytes=max_bytes)
        finally:
            remove_snapshot(client, key, snapshotter)
