"""Container records: the spec, the snapshot and the labels containerd keeps for us.

A container record is ctrexec's durable state. Its labels say who owns it and how to
run it again; its ``extensions`` hold the full TaskConfig so a new ctrexec process can
rebuild everything after a restart.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import attrs
from google.protobuf import any_pb2, empty_pb2, field_mask_pb2

from ctrexec import _rpc, errors, ids
from ctrexec._api.containerd.services.containers.v1 import containers_pb2
from ctrexec.containerd._proto import from_timestamp
from ctrexec.containerd.client import Client

SPEC_TYPE_URL = "types.containerd.io/opencontainers/runtime-spec/1/Spec"


@attrs.frozen
class Runtime:
    """containerd runtime (shim) name plus its options Any."""

    name: str
    options: any_pb2.Any | None = None


def _decoded(spec: dict[str, Any] | bytes) -> dict[str, Any]:
    """The spec as JSON: a record compares by what its spec says, decoded or not."""
    if isinstance(spec, bytes):
        return json.loads(spec) if spec else {}
    return spec


@attrs.frozen
class Container:
    """One container record as stored by containerd.

    Its ``spec`` is decoded at its first read: a listing's reader (``ps``) that reads
    only ids, labels and states decodes none of the ~10 KB specs, which cost ``ps`` a
    tenth of a millisecond a container (issue 40). ``Container(spec=...)`` takes the
    decoded dict, or the JSON bytes as containerd sends them.
    """

    id: str
    image: str
    labels: Mapping[str, str]
    _spec: dict[str, Any] | bytes = attrs.field(alias="spec", eq=_decoded)
    snapshotter: str
    snapshot_key: str
    runtime: Runtime
    extensions: Mapping[str, any_pb2.Any]
    created_at: datetime | None

    @property
    def spec(self) -> dict[str, Any]:
        spec = _decoded(self._spec)
        if spec is not self._spec:  # kept: one decode however often it is read
            object.__setattr__(self, "_spec", spec)
        return spec

    @classmethod
    def from_proto(cls, c: containers_pb2.Container) -> Container:
        created = from_timestamp(c.created_at)
        options = any_pb2.Any()
        if c.runtime.HasField("options"):
            options.CopyFrom(c.runtime.options)
        return cls(
            id=c.id,
            image=c.image,
            labels=dict(c.labels),
            spec=c.spec.value,
            snapshotter=c.snapshotter,
            snapshot_key=c.snapshot_key,
            runtime=Runtime(
                name=c.runtime.name,
                options=options if c.runtime.HasField("options") else None,
            ),
            extensions={k: v for k, v in c.extensions.items()},
            created_at=created,
        )

    def extension_json(self, key: str) -> Any:
        """A JSON extension written by :func:`json_extension`, or None."""
        ext = self.extensions.get(key)
        return json.loads(ext.value) if ext is not None and ext.value else None


def json_extension(type_url: str, value: Any) -> any_pb2.Any:
    return any_pb2.Any(type_url=type_url, value=json.dumps(value, sort_keys=True).encode())


def create(
    client: Client,
    container_id: str,
    *,
    image: str,
    spec: dict[str, Any],
    snapshotter: str,
    snapshot_key: str,
    runtime: Runtime,
    labels: Mapping[str, str],
    extensions: Mapping[str, any_pb2.Any] | None = None,
    lease: str | None = None,
) -> Container:
    """Create the record. The caller made the snapshot under the same lease."""
    c = containers_pb2.Container(
        id=container_id,
        image=image,
        labels=dict(labels),
        snapshotter=snapshotter,
        snapshot_key=snapshot_key,
        spec=any_pb2.Any(type_url=SPEC_TYPE_URL, value=json.dumps(spec).encode()),
    )
    c.runtime.name = runtime.name
    if runtime.options is not None:
        c.runtime.options.CopyFrom(runtime.options)
    for key, value in (extensions or {}).items():
        c.extensions[key].CopyFrom(value)
    resp = client._call(
        _rpc.CONTAINERS,
        "Create",
        containers_pb2.CreateContainerRequest(container=c),
        containers_pb2.CreateContainerResponse,
        lease=lease,
    )
    return Container.from_proto(resp.container)


def get(client: Client, container_id: str) -> Container:
    """The record; a missing one is reported in docker's words, not containerd's."""
    try:
        resp = client._call(
            _rpc.CONTAINERS,
            "Get",
            containers_pb2.GetContainerRequest(id=container_id),
            containers_pb2.GetContainerResponse,
        )
    except errors.NotFound as exc:
        raise errors.NotFound(f"No such container: {container_id}") from exc
    return Container.from_proto(resp.container)


#: The (address, namespace) pairs whose listing passed one message's limit: asked with
#: ListStream from then on in this process (a supervisor, a driver), not List first.
_streamed: set[tuple[str, str]] = set()


def list_containers(client: Client, *filters: str) -> list[Container]:
    """Containers matching any of containerd's filter expressions (``labels."k"==v``).

    List's one answer passes gRPC's 16 MiB limit at ~1,600 containers (a record is
    ~10 KB), and containerd refuses it (ResourceExhausted): such a listing is read again
    with ListStream, one record a message, and that namespace is streamed from then on
    (issue 40). Not always streamed: a stream costs ~5 ms to set up and twice List's
    time per record in Python's gRPC (87 ms against 45 ms at 300 records), which every
    ``ps`` would pay for a namespace far below the limit.
    """
    request = containers_pb2.ListContainersRequest(filters=list(filters))
    where = (client.address, client.namespace)
    if where not in _streamed:
        try:
            resp = client._call(
                _rpc.CONTAINERS, "List", request, containers_pb2.ListContainersResponse
            )
            return [Container.from_proto(c) for c in resp.containers]
        except errors.ResourceExhausted:
            _streamed.add(where)
    stream = client._connection.server_stream(
        _rpc.CONTAINERS,
        "ListStream",
        request,
        containers_pb2.ListContainerMessage,
        namespace=client.namespace,
    )
    try:
        return [Container.from_proto(m.container) for m in stream]
    finally:
        stream.cancel()


class Lookup:
    """Container ids from the words a user typed, by docker's rule for IDs: the exact
    id, else the only id the word begins (``ps`` cuts ids to 12 characters).

    An exact id costs one Get. Any other word is matched against one listing of the
    namespace, made at the first such word and kept for the rest: the words of one
    command are matched against one moment's containers, and an id in that listing
    that equals the word wins over the ids it begins.
    """

    def __init__(self, client: Client) -> None:
        self._client = client
        self._ids: list[str] | None = None

    def __call__(self, given: str) -> str:
        """The id ``given`` names; NotFound (docker's words) or AmbiguousPrefix."""
        if ids.is_valid_id(given):
            try:
                return get(self._client, given).id
            except errors.NotFound:
                pass
        if self._ids is None:
            self._ids = [c.id for c in list_containers(self._client)]
        found = ids.by_prefix(given, self._ids)
        if found is None:
            raise errors.NotFound(f"No such container: {given}")
        return found

    def named(self, given: Iterable[str]) -> dict[str, str]:
        """Each word that names one container, with its id; the others are left out
        (a verb of many acts on these at once, then reports each word in turn)."""
        out = {}
        for word in given:
            try:
                out[word] = self(word)
            except (errors.NotFound, errors.AmbiguousPrefix):
                continue
        return out


def update_labels(client: Client, container_id: str, labels: Mapping[str, str | None]) -> Container:
    """Set the given labels, or remove those whose value is None; touch no other field.

    containerd deletes a label that is named in the field mask but absent from the
    update, which is how None is sent.
    """
    c = containers_pb2.Container(
        id=container_id, labels={k: v for k, v in labels.items() if v is not None}
    )
    mask = field_mask_pb2.FieldMask(paths=[f"labels.{k}" for k in labels])
    resp = client._call(
        _rpc.CONTAINERS,
        "Update",
        containers_pb2.UpdateContainerRequest(container=c, update_mask=mask),
        containers_pb2.UpdateContainerResponse,
    )
    return Container.from_proto(resp.container)


def delete(client: Client, container_id: str) -> None:
    client._call(
        _rpc.CONTAINERS,
        "Delete",
        containers_pb2.DeleteContainerRequest(id=container_id),
        empty_pb2.Empty,
    )


def label_filter(key: str, value: str | None = None) -> str:
    """containerd filter syntax for a label, quoting keys that contain dots."""
    return f'labels."{key}"' if value is None else f'labels."{key}"=={json.dumps(value)}'
