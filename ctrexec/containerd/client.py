"""The containerd client: one connection, a namespace, leases.

A :class:`Client` is cheap to share between threads (gRPC channels are thread-safe),
and :meth:`Client.with_namespace` gives a view onto another namespace over the same
channel. Domain modules reach containerd through ``Client._call`` and
``Client._connection`` (private: a scheduler uses the typed calls); nothing above ``_rpc``
sees a gRPC type.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import warnings
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, Self, TypedDict, TypeVar, Unpack

import attrs
from google.protobuf import any_pb2, empty_pb2
from google.protobuf.message import Message

from ctrexec import _rpc, defaults, errors
from ctrexec._api.containerd.services.version.v1 import version_pb2
from ctrexec.containerd._proto import from_timestamp
from ctrexec.ids import validate_id

M = TypeVar("M", bound=Message)

DEFAULT_ADDRESS = defaults.DEFAULT_ADDRESS
ADDRESS_ENV = defaults.ADDRESS_ENV
DEFAULT_NAMESPACE = defaults.DEFAULT_NAMESPACE
NAMESPACE_ENV = defaults.NAMESPACE_ENV
#: containerd deletes a lease carrying this label once the time has passed, so a
#: lease left by a crashed ctrexec does not pin content forever.
LEASE_EXPIRE_LABEL = "containerd.io/gc.expire"
DEFAULT_LEASE_TTL = timedelta(hours=1)
#: The start of every lease id ctrexec makes (``gc`` judges only these).
LEASE_ID_PREFIX = "ctrexec-"


class CallOptions(TypedDict, total=False):
    """The keyword options of :meth:`Client.call`."""

    lease: str | None
    timeout: _rpc.Timeout


#: Shim binaries that ``info`` reports as usable runtimes when found on PATH.
KNOWN_RUNTIMES = {
    "io.containerd.runc.v2": "containerd-shim-runc-v2",
    "io.containerd.runsc.v1": "containerd-shim-runsc-v1",
}
KNOWN_OCI_BINARIES = ("runc", "crun", "runsc", "youki")
RUNC_V2 = "io.containerd.runc.v2"
#: The plugin that answers Introspection.PluginInfo about a runtime (containerd 2.x).
TASK_RUNTIME_PLUGIN = ("io.containerd.runtime.v2", "task")
_RUNTIME_INFO = "containerd.types.RuntimeInfo"
_RUNC_OPTIONS = "containerd.runc.v1.Options"
#: The Any type URL of the OCI runtime's ``features`` document.
FEATURES_TYPE_URL = "types.containerd.io/opencontainers/runtime-spec/1/features/Features"


@attrs.frozen
class ServerVersion:
    """containerd's own version and git revision."""

    version: str
    revision: str


@attrs.frozen
class Lease:
    """A containerd lease: content and snapshots made under it are safe from GC."""

    id: str
    labels: Mapping[str, str] = attrs.field(factory=dict)
    created_at: datetime | None = None


@attrs.frozen
class Plugin:
    """One containerd plugin as reported by the introspection service."""

    type: str
    id: str
    ok: bool
    error: str = ""


@attrs.frozen
class RuntimeFeatures:
    """What containerd 2.x's task runtime says about a shim (``shim -info``): the OCI
    binary it runs and that binary's ``features`` document (runc's ``features`` JSON).

    ``binary`` is the runc options' ``BinaryName``, else ``runc``: the runc v2 shim's
    default when none is set; empty for another shim."""

    runtime: str
    binary: str
    shim_version: str = ""
    features: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def binary_version(self) -> str:
        """The OCI binary's version, as its features' annotations give it (runc's)."""
        notes = self.features.get("annotations")
        return (
            str(notes.get("org.opencontainers.runc.version", "")) if isinstance(notes, dict) else ""
        )

    @property
    def oci_versions(self) -> str:
        """The OCI runtime-spec versions the binary takes, ``1.0.0..1.2.0``."""
        low, high = self.features.get("ociVersionMin"), self.features.get("ociVersionMax")
        return f"{low}..{high}" if low and high else ""


@attrs.frozen
class Deprecation:
    """A deprecated feature containerd (2.x) saw in use: its config, an image, a client."""

    id: str
    message: str
    last_seen: datetime | None = None


@attrs.frozen
class ServerDetails:
    """Introspection.Server: containerd 1.x fills ``uuid`` only; 2.x adds its pid and
    the deprecations it has seen (empty on 1.x, where the fields are unknown)."""

    uuid: str
    pid: int = 0
    deprecations: tuple[Deprecation, ...] = ()


#: Why a connection uses the containerd it does: named by the caller (the CLI's
#: ``--address``), ``$CONTAINERD_ADDRESS``, the system's socket because it exists, or
#: ctrexec's embedded daemon because there was none of these.
AddressSource = Literal["argument", "environment", "system", "embedded"]


@attrs.frozen
class AddressChoice:
    """Which containerd a connection talks to, and why.

    Two containerds on one host each hold their own tasks: a tool that silently moved
    from one to the other (a system containerd that appeared, a variable set in one
    shell only) would show another set of tasks. So the choice is a value a front end
    can print (``ctrexec info``) and a service can log, not a rule buried in a connect.
    """

    address: str
    source: AddressSource
    #: The choice in words, for a person: ``embedded, started by ctrexec: ...``.
    reason: str

    @classmethod
    def resolve(cls, address: str | None = None) -> AddressChoice:
        """The rule of ctrexec's command line: ``address`` if given, else
        ``$CONTAINERD_ADDRESS``, else the system socket if it exists, else the embedded
        daemon's socket (which the caller starts: see :class:`EmbeddedContainerd`).

        :meth:`Client.connect` without an address stops before the last step: a library
        never starts a daemon on its own.
        """
        if address:
            return cls(_rpc.resolve_address(address), "argument", "named explicitly (--address)")
        env = os.environ.get(ADDRESS_ENV)
        if env:
            return cls(_rpc.resolve_address(env), "environment", f"from ${ADDRESS_ENV}")
        if Path(DEFAULT_ADDRESS).exists():
            return cls(DEFAULT_ADDRESS, "system", f"system containerd: {DEFAULT_ADDRESS} exists")
        # here, not at the top: only this case needs it
        from ctrexec.containerd.daemonpaths import default_paths

        return cls(
            default_paths().address,
            "embedded",
            f"embedded, started by ctrexec: no ${ADDRESS_ENV} and no {DEFAULT_ADDRESS}",
        )


def _connect_choice(address: str | AddressChoice | None) -> AddressChoice:
    """What :meth:`Client.connect` was given, as a choice: never the embedded daemon."""
    if isinstance(address, AddressChoice):
        return address
    if address or os.environ.get(ADDRESS_ENV):
        return AddressChoice.resolve(address)
    return AddressChoice(DEFAULT_ADDRESS, "system", "system containerd, the default address")


@attrs.frozen
class ServerInfo:
    """What ``ctrexec info`` shows: where we talk, to what, and what it can run."""

    address: str
    namespace: str
    version: ServerVersion
    namespaces: tuple[str, ...]
    snapshotters: tuple[str, ...]
    runtimes: tuple[str, ...]
    oci_runtimes: tuple[str, ...]
    #: The daemon's own answer about runc v2 (containerd 2.x); None when it cannot say.
    runc: RuntimeFeatures | None = None
    #: Why the daemon could not say, when it failed to (not when it lacks the call).
    runc_error: str = ""
    deprecations: tuple[Deprecation, ...] = ()
    #: Which containerd this is and why (the address's source): for ``info`` to say.
    address_choice: AddressChoice | None = None


class Client:
    """A connection to containerd bound to one namespace.

    Build it with :meth:`connect`, which checks the socket and that containerd answers.
    """

    def __init__(
        self,
        conn: _rpc.Connection,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        owns_connection: bool = True,
        address_choice: AddressChoice | None = None,
    ) -> None:
        self._conn = conn
        self.namespace = validate_id(namespace, kind="namespace")
        self._owns = owns_connection
        self._address_choice = address_choice
        #: What containerd answered when :meth:`connect` checked the connection.
        self.server_version: ServerVersion | None = None

    @classmethod
    def connect(
        cls,
        address: str | AddressChoice | None = None,
        *,
        namespace: str | None = None,
        timeout: float = _rpc.DEFAULT_TIMEOUT,
    ) -> Self:
        """Open a checked connection; raise ConnectError with a one-line reason if unusable.

        ``address``: a socket, or an :class:`AddressChoice` (the client keeps it as its
        :attr:`address_choice`); None is ``$CONTAINERD_ADDRESS``, else the system socket.
        """
        ns = (
            namespace if namespace is not None else os.environ.get(NAMESPACE_ENV, DEFAULT_NAMESPACE)
        )
        validate_id(ns, kind="namespace")
        choice = _connect_choice(address)
        path = choice.address
        _rpc.check_socket(path)
        conn = _rpc.Connection(path, default_timeout=timeout)
        client = cls(conn, namespace=ns, address_choice=choice)
        try:
            client.server_version = client.version(timeout=min(timeout, 10.0))
        except errors.Unimplemented as exc:
            conn.close()
            raise errors.ConnectError(f"{path} does not serve containerd's API") from exc
        except errors.CtrexecError as exc:
            conn.close()
            raise errors.ConnectError(f"cannot reach containerd at {path}: {exc}") from exc
        return client

    # -- plumbing -----------------------------------------------------------------

    @property
    def address(self) -> str:
        return self._conn.address

    @property
    def address_choice(self) -> AddressChoice:
        """Which containerd this is and why: what :meth:`connect` was given, or (a client
        made on a connection) its address, named by the caller."""
        return self._address_choice or _connect_choice(self.address)

    @property
    def _connection(self) -> _rpc.Connection:
        """The raw connection, for ctrexec's domain modules: streams, futures, the observer."""
        return self._conn

    def _call(
        self,
        service: str,
        method: str,
        request: Message,
        response_type: type[M],
        *,
        lease: str | None = None,
        timeout: _rpc.Timeout = None,
    ) -> M:
        """A unary call in this client's namespace, for ctrexec's domain modules."""
        return self._conn.unary(
            service,
            method,
            request,
            response_type,
            namespace=self.namespace,
            lease=lease,
            timeout=timeout,
        )

    def _call_or_none(
        self,
        service: str,
        method: str,
        request: Message,
        response_type: type[M],
        **options: Unpack[CallOptions],
    ) -> M | None:
        """:meth:`_call`, with None for containerd's NotFound: for the calls whose
        "there is no such thing" is an answer, not a failure."""
        try:
            return self._call(service, method, request, response_type, **options)
        except errors.NotFound:
            return None

    # The raw RPC was public until issue 38 made it private: a scheduler reaches containerd
    # through the typed calls, and a raw message type ties its code to the wire. The old
    # names keep working for one release.

    @property
    def rpc(self) -> _rpc.Connection:
        """Deprecated: the raw connection is private."""
        _raw_rpc_deprecated("rpc")
        return self._conn

    def call(
        self,
        service: str,
        method: str,
        request: Message,
        response_type: type[M],
        *,
        lease: str | None = None,
        timeout: _rpc.Timeout = None,
    ) -> M:
        """Deprecated: the raw RPC is private."""
        _raw_rpc_deprecated("call")
        return self._call(service, method, request, response_type, lease=lease, timeout=timeout)

    def call_or_none(
        self,
        service: str,
        method: str,
        request: Message,
        response_type: type[M],
        **options: Unpack[CallOptions],
    ) -> M | None:
        """Deprecated: the raw RPC is private."""
        _raw_rpc_deprecated("call_or_none")
        return self._call_or_none(service, method, request, response_type, **options)

    def with_namespace(self, namespace: str) -> Client:
        """A client for another namespace sharing this one's channel."""
        return Client(
            self._conn,
            namespace=namespace,
            owns_connection=False,
            address_choice=self._address_choice,
        )

    def close(self) -> None:
        if self._owns:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- server ---------------------------------------------------------------------

    def version(self, *, timeout: float | None = None) -> ServerVersion:
        resp = self._conn.unary(
            _rpc.VERSION, "Version", empty_pb2.Empty(), version_pb2.VersionResponse, timeout=timeout
        )
        return ServerVersion(version=resp.version, revision=resp.revision)

    def namespaces(self) -> list[str]:
        # start-up: the Namespaces service's messages load on its first use
        from ctrexec._api.containerd.services.namespaces.v1 import namespace_pb2

        resp = self._conn.unary(
            _rpc.NAMESPACES,
            "List",
            namespace_pb2.ListNamespacesRequest(),
            namespace_pb2.ListNamespacesResponse,
        )
        return sorted(ns.name for ns in resp.namespaces)

    def delete_namespace(self) -> None:
        """Remove this client's namespace. containerd refuses (FailedPrecondition) while
        it holds images, content, snapshots or containers, and answers NotFound when
        there is none."""
        # start-up: the Namespaces service's messages load on its first use
        from ctrexec._api.containerd.services.namespaces.v1 import namespace_pb2

        req = namespace_pb2.DeleteNamespaceRequest(name=self.namespace)
        self._call(_rpc.NAMESPACES, "Delete", req, empty_pb2.Empty)

    def plugins(self, *filters: str) -> list[Plugin]:
        # start-up: the Introspection service's messages load on its first use
        from ctrexec._api.containerd.services.introspection.v1 import introspection_pb2

        resp = self._conn.unary(
            _rpc.INTROSPECTION,
            "Plugins",
            introspection_pb2.PluginsRequest(filters=list(filters)),
            introspection_pb2.PluginsResponse,
        )
        return [
            Plugin(
                type=p.type,
                id=p.id,
                ok=not p.HasField("init_err"),
                error=p.init_err.message if p.HasField("init_err") else "",
            )
            for p in resp.plugins
        ]

    def server(self) -> ServerDetails:
        """Introspection.Server, with 2.x's deprecations when the daemon reports them."""
        # start-up: the Introspection service's messages load on its first use
        from ctrexec._api.containerd.services.introspection.v1 import introspection_pb2

        resp = self._conn.unary(
            _rpc.INTROSPECTION, "Server", empty_pb2.Empty(), introspection_pb2.ServerResponse
        )
        found = tuple(
            Deprecation(id=w.id, message=w.message, last_seen=from_timestamp(w.last_occurrence))
            for w in resp.deprecations
        )
        return ServerDetails(uuid=resp.uuid, pid=resp.pid, deprecations=found)

    def runtime_features(
        self, runtime: str = RUNC_V2, *, binary: str | None = None
    ) -> RuntimeFeatures | None:
        """What containerd's task runtime says about ``runtime`` (Introspection.PluginInfo,
        containerd 2.x): the daemon runs the shim it would run, with its own PATH. None
        when the daemon has no such call (1.x answers Unimplemented). ``binary``: ask
        about another runc-compatible binary (the runc options' BinaryName)."""
        # start-up: the Introspection service's messages load on its first use
        from ctrexec._api.containerd.services.introspection.v1 import introspection_pb2
        from ctrexec._api.containerd.types import introspection_pb2 as runtime_pb2
        from ctrexec._api.runc.options import oci_pb2

        request = runtime_pb2.RuntimeRequest(runtime_path=runtime)
        if binary:
            opts = oci_pb2.Options(binary_name=binary).SerializeToString()
            request.options.CopyFrom(any_pb2.Any(type_url=_RUNC_OPTIONS, value=opts))
        kind, plugin_id = TASK_RUNTIME_PLUGIN
        req = introspection_pb2.PluginInfoRequest(type=kind, id=plugin_id)
        req.options.Pack(request)
        try:
            resp = self._conn.unary(
                _rpc.INTROSPECTION, "PluginInfo", req, introspection_pb2.PluginInfoResponse
            )
        except errors.Unimplemented:
            return None
        return _runtime_features(runtime, resp.extra)

    def info(self) -> ServerInfo:
        """What ``ctrexec info`` shows. runc v2 is what the daemon says when it can
        (containerd 2.x runs the shim itself, on its own PATH), else what this process's
        PATH holds."""
        plugins = self.plugins()
        snapshotters = tuple(
            sorted(p.id for p in plugins if p.type == "io.containerd.snapshotter.v1" and p.ok)
        )
        runc, runc_error = None, ""
        try:
            runc = self.runtime_features(RUNC_V2)
        except errors.CtrexecError as exc:
            runc_error = str(exc)
        on_path = {name for name, shim in KNOWN_RUNTIMES.items() if shutil.which(shim)}
        oci = [b for b in KNOWN_OCI_BINARIES if shutil.which(b)]
        if runc is not None:
            on_path.add(RUNC_V2)
            oci = [runc.binary, *(b for b in oci if b != runc.binary)]
        return ServerInfo(
            address=self.address,
            namespace=self.namespace,
            version=self.version(),
            namespaces=tuple(self.namespaces()),
            snapshotters=snapshotters,
            runtimes=tuple(sorted(on_path)),
            oci_runtimes=tuple(oci),
            runc=runc,
            runc_error=runc_error,
            deprecations=self.server().deprecations,
            address_choice=self.address_choice,
        )

    # -- leases -----------------------------------------------------------------------

    def create_lease(
        self,
        *,
        lease_id: str | None = None,
        ttl: timedelta | None = DEFAULT_LEASE_TTL,
        labels: Mapping[str, str] | None = None,
    ) -> Lease:
        """Create a lease; with a ``ttl`` containerd expires it if we never delete it."""
        # start-up: the Leases service's messages load on its first use
        from ctrexec._api.containerd.services.leases.v1 import leases_pb2

        lid = (
            validate_id(lease_id, kind="lease id")
            if lease_id
            else f"{LEASE_ID_PREFIX}{secrets.token_hex(8)}"
        )
        all_labels = dict(labels or {})
        if ttl is not None:
            expire = datetime.now(UTC) + ttl
            all_labels[LEASE_EXPIRE_LABEL] = expire.strftime("%Y-%m-%dT%H:%M:%SZ")
        resp = self._call(
            _rpc.LEASES,
            "Create",
            leases_pb2.CreateRequest(id=lid, labels=all_labels),
            leases_pb2.CreateResponse,
        )
        return Lease(id=resp.lease.id, labels=dict(resp.lease.labels))

    def delete_lease(self, lease_id: str, *, sync: bool = False) -> None:
        # start-up: the Leases service's messages load on its first use
        from ctrexec._api.containerd.services.leases.v1 import leases_pb2

        self._call(
            _rpc.LEASES,
            "Delete",
            leases_pb2.DeleteRequest(id=lease_id, sync=sync),
            empty_pb2.Empty,
        )

    def leases(self) -> list[Lease]:
        # start-up: the Leases service's messages load on its first use
        from ctrexec._api.containerd.services.leases.v1 import leases_pb2

        resp = self._call(_rpc.LEASES, "List", leases_pb2.ListRequest(), leases_pb2.ListResponse)
        return [
            Lease(id=le.id, labels=dict(le.labels), created_at=from_timestamp(le.created_at))
            for le in resp.leases
        ]

    def lease_resources(self, lease_id: str) -> list[tuple[str, str]]:
        """What a lease holds, as (type, id): ``snapshots/overlayfs`` and a key, ``content``
        and a digest, ... (empty when the lease is gone)."""
        # start-up: the Leases service's messages load on its first use
        from ctrexec._api.containerd.services.leases.v1 import leases_pb2

        resp = self._call_or_none(
            _rpc.LEASES,
            "ListResources",
            leases_pb2.ListResourcesRequest(id=lease_id),
            leases_pb2.ListResourcesResponse,
        )
        return [] if resp is None else [(r.type, r.id) for r in resp.resources]

    @contextlib.contextmanager
    def lease(
        self, *, ttl: timedelta | None = DEFAULT_LEASE_TTL, labels: Mapping[str, str] | None = None
    ) -> Iterator[Lease]:
        """A lease for the duration of the block, deleted on exit even after an error."""
        lease = self.create_lease(ttl=ttl, labels=labels)
        try:
            yield lease
        finally:
            with contextlib.suppress(errors.NotFound):
                self.delete_lease(lease.id)


def _raw_rpc_deprecated(name: str) -> None:
    warnings.warn(
        f"Client.{name} is deprecated: containerd's raw RPC is private to ctrexec",
        DeprecationWarning,
        stacklevel=3,
    )


def _runtime_features(runtime: str, extra: any_pb2.Any) -> RuntimeFeatures:
    """PluginInfo's ``extra`` for a runtime. containerd writes its type URL as the bare
    name (``containerd.types.RuntimeInfo``, no ``/``), which ``Any.Unpack`` refuses, so
    the name is compared here."""
    if extra.type_url.rsplit("/", 1)[-1] != _RUNTIME_INFO:
        raise errors.Internal(f"PluginInfo for {runtime} answered with {extra.type_url!r}")
    # start-up: the runtime's messages load with the Introspection call that needs them
    from ctrexec._api.containerd.types import introspection_pb2 as runtime_pb2
    from ctrexec._api.runc.options import oci_pb2

    info = runtime_pb2.RuntimeInfo.FromString(extra.value)
    binary = "runc" if runtime == RUNC_V2 else ""
    if info.options.type_url.rsplit("/", 1)[-1] == _RUNC_OPTIONS:
        binary = oci_pb2.Options.FromString(info.options.value).binary_name or binary
    features: dict[str, Any] = {}
    if info.features.type_url == FEATURES_TYPE_URL:
        with contextlib.suppress(ValueError):
            doc = json.loads(info.features.value)
            features = doc if isinstance(doc, dict) else {}
    return RuntimeFeatures(
        runtime=info.name or runtime,
        binary=binary,
        shim_version=info.version.version,
        features=features,
    )
