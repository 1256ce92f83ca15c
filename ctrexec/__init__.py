"""ctrexec: run containers through containerd's API in pre-created network namespaces.

The public API is re-exported here; everything else is private to the package.

The names are loaded on first use (PEP 562): ``import ctrexec`` or a light submodule
(the CLI's parser, :mod:`ctrexec.defaults`) must not pay for grpc, the generated stubs
and pyroute2. Type checkers and IDEs read the ``TYPE_CHECKING`` imports instead.

``_WHERE`` is the one hand-kept list of public names: ``__all__`` and what
``__getattr__`` loads are made from it. Type checkers cannot read it, so each name is
also imported under ``TYPE_CHECKING``, in the ``X as X`` form that re-exports it;
tests/unit/test_public_typing.py fails, naming the lines to add or drop, unless those
imports are exactly ``_WHERE`` and each one is the object ``ctrexec.X`` gives.
"""

from __future__ import annotations

import sys

#: ``typing`` would cost the command line's client (:mod:`ctrexec.cli.client`) most of
#: its start-up (it loads ``re`` and ``collections``); mypy reads this name as typing's.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType

    from ctrexec._linux import cgroup_v2_only as cgroup_v2_only
    from ctrexec._linux import die_with_parent as die_with_parent
    from ctrexec._version import VERSION as _VERSION
    from ctrexec.containerd._proto import to_timestamp as to_timestamp
    from ctrexec.containerd.client import AddressChoice as AddressChoice
    from ctrexec.containerd.client import AddressSource as AddressSource
    from ctrexec.containerd.client import Client as Client
    from ctrexec.containerd.client import Deprecation as Deprecation
    from ctrexec.containerd.client import Lease as Lease
    from ctrexec.containerd.client import Plugin as Plugin
    from ctrexec.containerd.client import RuntimeFeatures as RuntimeFeatures
    from ctrexec.containerd.client import ServerDetails as ServerDetails
    from ctrexec.containerd.client import ServerInfo as ServerInfo
    from ctrexec.containerd.client import ServerVersion as ServerVersion
    from ctrexec.containerd.containers import Container as Container
    from ctrexec.containerd.containers import Lookup as _ContainerLookup
    from ctrexec.containerd.containers import Runtime as _ContainerRuntime
    from ctrexec.containerd.content import Descriptor as Descriptor
    from ctrexec.containerd.content import Platform as Platform
    from ctrexec.containerd.daemon import EmbeddedContainerd as EmbeddedContainerd
    from ctrexec.containerd.daemonpaths import DaemonPaths as DaemonPaths
    from ctrexec.containerd.events import Event as Event
    from ctrexec.containerd.events import EventsMissed as EventsMissed
    from ctrexec.containerd.events import ExecExited as ExecExited
    from ctrexec.containerd.events import ExecStarted as ExecStarted
    from ctrexec.containerd.events import TaskDeleted as TaskDeleted
    from ctrexec.containerd.events import TaskEvent as TaskEvent
    from ctrexec.containerd.events import TaskExited as TaskExited
    from ctrexec.containerd.events import TaskOOM as TaskOOM
    from ctrexec.containerd.events import TaskPaused as TaskPaused
    from ctrexec.containerd.events import TaskResumed as TaskResumed
    from ctrexec.containerd.events import TaskStarted as TaskStarted
    from ctrexec.containerd.execs import DetachedExec as DetachedExec
    from ctrexec.containerd.execs import ExecResult as ExecResult
    from ctrexec.containerd.images import Image as Image
    from ctrexec.containerd.images import ImageCache as ImageCache
    from ctrexec.containerd.images import ImageConfig as ImageConfig
    from ctrexec.containerd.images import ImageSummary as ImageSummary
    from ctrexec.containerd.images import list_images as list_images
    from ctrexec.containerd.stats import Stats as Stats
    from ctrexec.containerd.streams import OutputCallback as OutputCallback
    from ctrexec.containerd.streams import Process as Process
    from ctrexec.containerd.streams import StreamOptions as StreamOptions
    from ctrexec.containerd.tasks import ExitStatus as ExitStatus
    from ctrexec.containerd.tasks import Status as Status
    from ctrexec.defaults import ADDRESS_ENV as ADDRESS_ENV
    from ctrexec.defaults import DEFAULT_ADDRESS as DEFAULT_ADDRESS
    from ctrexec.defaults import DEFAULT_LOG_DIR as DEFAULT_LOG_DIR
    from ctrexec.defaults import DEFAULT_LOG_MAX_FILES as DEFAULT_LOG_MAX_FILES
    from ctrexec.defaults import DEFAULT_LOG_MAX_SIZE as DEFAULT_LOG_MAX_SIZE
    from ctrexec.defaults import DEFAULT_NAMESPACE as DEFAULT_NAMESPACE
    from ctrexec.defaults import DEFAULT_STOP_TIMEOUT as DEFAULT_STOP_TIMEOUT
    from ctrexec.defaults import DEFAULT_SUBNET as DEFAULT_SUBNET
    from ctrexec.defaults import NAMESPACE_ENV as NAMESPACE_ENV
    from ctrexec.defaults import SUBNET_ENV as SUBNET_ENV
    from ctrexec.doctor.checks import Failure as Failure
    from ctrexec.doctor.checks import GcReport as GcReport
    from ctrexec.doctor.checks import doctor as doctor
    from ctrexec.doctor.checks import gc as gc
    from ctrexec.doctor.findings import Check as Check
    from ctrexec.doctor.findings import Finding as Finding
    from ctrexec.doctor.findings import Scope as Scope
    from ctrexec.doctor.nomadsockets import sweep_nomad_sockets as sweep_nomad_sockets
    from ctrexec.doctor.prune import ContainerFilter as ContainerFilter
    from ctrexec.doctor.prune import ContainerPruneReport as ContainerPruneReport
    from ctrexec.doctor.prune import SystemPruneReport as SystemPruneReport
    from ctrexec.doctor.prune import prune_containers as prune_containers
    from ctrexec.doctor.prune import prune_system as prune_system
    from ctrexec.errors import AlreadyExists as AlreadyExists
    from ctrexec.errors import AlreadyRunning as AlreadyRunning
    from ctrexec.errors import AmbiguousPrefix as AmbiguousPrefix
    from ctrexec.errors import Canceled as Canceled
    from ctrexec.errors import CNIError as CNIError
    from ctrexec.errors import CommandNotExecutable as CommandNotExecutable
    from ctrexec.errors import CommandNotFound as CommandNotFound
    from ctrexec.errors import Conflict as Conflict
    from ctrexec.errors import ConnectError as ConnectError
    from ctrexec.errors import CtrexecError as CtrexecError
    from ctrexec.errors import DaemonError as DaemonError
    from ctrexec.errors import DeadlineExceeded as DeadlineExceeded
    from ctrexec.errors import DigestMismatch as DigestMismatch
    from ctrexec.errors import FailedPrecondition as FailedPrecondition
    from ctrexec.errors import HandleMismatch as HandleMismatch
    from ctrexec.errors import Internal as Internal
    from ctrexec.errors import InvalidArgument as InvalidArgument
    from ctrexec.errors import InvalidField as InvalidField
    from ctrexec.errors import MissingArguments as MissingArguments
    from ctrexec.errors import NetworkError as NetworkError
    from ctrexec.errors import NotATerminal as NotATerminal
    from ctrexec.errors import NotFound as NotFound
    from ctrexec.errors import NotModified as NotModified
    from ctrexec.errors import PermissionDenied as PermissionDenied
    from ctrexec.errors import RegistryError as RegistryError
    from ctrexec.errors import RegistryRefused as RegistryRefused
    from ctrexec.errors import ResourceExhausted as ResourceExhausted
    from ctrexec.errors import TaskError as TaskError
    from ctrexec.errors import Unavailable as Unavailable
    from ctrexec.errors import Unimplemented as Unimplemented
    from ctrexec.errors import UnknownCommand as UnknownCommand
    from ctrexec.groups.presence import is_supervised as is_supervised
    from ctrexec.groups.spec import GroupSpec as GroupSpec
    from ctrexec.groups.spec import load_group_file as load_group_file
    from ctrexec.groups.spec import parse_group as parse_group
    from ctrexec.groups.supervisor import Supervisor as Supervisor
    from ctrexec.groups.updown import Groups as Groups
    from ctrexec.images.commit import check_changes as check_changes
    from ctrexec.images.commit import commit_container as commit_container
    from ctrexec.images.exporter import export_archive as export_archive
    from ctrexec.images.importer import ImportedImage as ImportedImage
    from ctrexec.images.importer import import_archive as import_archive
    from ctrexec.images.lookup import ensure_image as ensure_image
    from ctrexec.images.lookup import get_image as get_image
    from ctrexec.images.prune import PruneReport as PruneReport
    from ctrexec.images.prune import prune_images as prune_images
    from ctrexec.images.reference import Reference as Reference
    from ctrexec.images.reference import normalize_reference as normalize_reference
    from ctrexec.images.reference import parse_reference as parse_reference
    from ctrexec.images.registry.auth import Credentials as _RegistryCredentials
    from ctrexec.images.registry.auth import credentials_from_helper as credentials_from_helper
    from ctrexec.images.registry.auth import erase as _registry_logout
    from ctrexec.images.registry.client import login as _registry_login
    from ctrexec.images.registry.pull import PullEvent as PullEvent
    from ctrexec.images.registry.pull import ensure_pulled as ensure_pulled
    from ctrexec.images.registry.pull import pull as pull
    from ctrexec.images.registry.push import PushResult as PushResult
    from ctrexec.images.registry.push import push as push
    from ctrexec.images.tagging import tag_image as tag_image
    from ctrexec.images.usage import image_usage as image_usage
    from ctrexec.images.usage import remove_image as remove_image
    from ctrexec.images.usage import resolve_image as resolve_image
    from ctrexec.logs.modes import DRIVERS as _LOG_DRIVERS
    from ctrexec.logs.modes import parse_log_opts as parse_log_opts
    from ctrexec.logs.reader import LogEntry as LogEntry
    from ctrexec.logs.reader import read_logs as read_logs
    from ctrexec.logs.reader import read_task_logs as read_task_logs
    from ctrexec.net.cni import PortMapping as PortMapping
    from ctrexec.net.cniconf import CNIAttachment as CNIAttachment
    from ctrexec.net.cniconf import PluginCall as PluginCall
    from ctrexec.net.hostfiles import Resolver as _ResolvConf
    from ctrexec.net.hostfiles import host_resolver as host_resolver
    from ctrexec.net.netns import NetNS as NetNS
    from ctrexec.net.netns import create as _create_netns
    from ctrexec.net.netns import list_namespaces as _list_netns
    from ctrexec.net.netns import remove as _remove_netns
    from ctrexec.net.networks import Attachment as Attachment
    from ctrexec.net.networks import Networks as Networks
    from ctrexec.net.nsinfo import Address as Address
    from ctrexec.net.nsinfo import Interface as Interface
    from ctrexec.net.nsinfo import NetNSInfo as NetNSInfo
    from ctrexec.net.nsinfo import Route as Route
    from ctrexec.net.nsinfo import inspect as _inspect_netns
    from ctrexec.net.nsrefs import NetnsUsage as NetnsUsage
    from ctrexec.net.nsrefs import NetnsUser as NetnsUser
    from ctrexec.net.nsrefs import usage as _netns_usage
    from ctrexec.net.settings import from_env as _networks_from_env
    from ctrexec.oci.caps import DEFAULT_CAPABILITIES as DEFAULT_CAPABILITIES
    from ctrexec.oci.caps import normalize_capability as normalize_capability
    from ctrexec.oci.mounts import Mount as Mount
    from ctrexec.paths import StrPath as StrPath
    from ctrexec.placement import helper_argv as helper_argv
    from ctrexec.placement import helper_placed as helper_placed
    from ctrexec.preloading import preload as preload
    from ctrexec.tasks.aio import AsyncExecutor as AsyncExecutor
    from ctrexec.tasks.cgroupfs import cgroupfs_relative as cgroupfs_relative
    from ctrexec.tasks.config import RestartPolicy as RestartPolicy
    from ctrexec.tasks.config import TaskConfig as TaskConfig
    from ctrexec.tasks.envfile import read_env_files as read_env_files
    from ctrexec.tasks.events import EventFilter as EventFilter
    from ctrexec.tasks.events import TaskEvents as TaskEvents
    from ctrexec.tasks.executor import Executor as Executor
    from ctrexec.tasks.info import inspect as _inspect_task
    from ctrexec.tasks.info import list_infos as _list_tasks
    from ctrexec.tasks.nomadtasks import NomadTask as NomadTask
    from ctrexec.tasks.nomadtasks import nomad_labels as nomad_labels
    from ctrexec.tasks.nomadtasks import nomad_task_id as nomad_task_id
    from ctrexec.tasks.nomadtasks import nomad_tasks as nomad_tasks
    from ctrexec.tasks.procs import Proc as _TaskProcess
    from ctrexec.tasks.publishing import NetworkRequest as NetworkRequest
    from ctrexec.tasks.rename import rename as rename
    from ctrexec.tasks.reports import TaskHandle as TaskHandle
    from ctrexec.tasks.reports import TaskInfo as TaskInfo
    from ctrexec.tasks.volumes import Volume as Volume
    from ctrexec.tasks.volumes import Volumes as Volumes

    # ``from m import a as b`` re-exports nothing for mypy; an assignment does.
    create_netns = _create_netns
    list_netns = _list_netns
    remove_netns = _remove_netns
    ContainerLookup = _ContainerLookup
    ContainerRuntime = _ContainerRuntime
    LOG_DRIVERS = _LOG_DRIVERS
    inspect_netns = _inspect_netns
    netns_usage = _netns_usage
    inspect_task = _inspect_task
    list_tasks = _list_tasks
    networks_from_env = _networks_from_env
    RegistryCredentials = _RegistryCredentials
    registry_login = _registry_login
    registry_logout = _registry_logout
    ResolvConf = _ResolvConf
    TaskProcess = _TaskProcess
    __version__ = _VERSION
else:
    ModuleType = type(sys)  # not ``types``: the command line's client does not load it

#: Every public name, by the module that defines it, loaded on first use (the errors
#: too, which the command line's client would otherwise load for nothing).
#: ``public=name`` is a name that is another in its module: ``netns.create`` is too
#: vague at the top level. ``read_task_logs`` is deprecated (it warns when called), to
#: be removed in the next release.
_WHERE: dict[str, tuple[str, ...]] = {
    "ctrexec._linux": ("cgroup_v2_only", "die_with_parent"),
    "ctrexec._version": ("__version__=VERSION",),
    "ctrexec.containerd._proto": ("to_timestamp",),
    "ctrexec.containerd.client": (
        "AddressChoice",
        "AddressSource",
        "Client",
        "Deprecation",
        "Lease",
        "Plugin",
        "RuntimeFeatures",
        "ServerDetails",
        "ServerInfo",
        "ServerVersion",
    ),
    "ctrexec.containerd.containers": (
        "Container",
        "ContainerLookup=Lookup",
        "ContainerRuntime=Runtime",
    ),
    "ctrexec.containerd.content": ("Descriptor", "Platform"),
    "ctrexec.containerd.daemon": ("EmbeddedContainerd",),
    "ctrexec.containerd.daemonpaths": ("DaemonPaths",),
    "ctrexec.containerd.events": (
        "Event",
        "EventsMissed",
        "ExecExited",
        "ExecStarted",
        "TaskDeleted",
        "TaskEvent",
        "TaskExited",
        "TaskOOM",
        "TaskPaused",
        "TaskResumed",
        "TaskStarted",
    ),
    "ctrexec.containerd.execs": ("DetachedExec", "ExecResult"),
    "ctrexec.containerd.images": (
        "Image",
        "ImageCache",
        "ImageConfig",
        "ImageSummary",
        "list_images",
    ),
    "ctrexec.containerd.stats": ("Stats",),
    "ctrexec.containerd.streams": ("OutputCallback", "Process", "StreamOptions"),
    "ctrexec.containerd.tasks": ("ExitStatus", "Status"),
    "ctrexec.defaults": (
        "ADDRESS_ENV",
        "DEFAULT_ADDRESS",
        "DEFAULT_LOG_DIR",
        "DEFAULT_LOG_MAX_FILES",
        "DEFAULT_LOG_MAX_SIZE",
        "DEFAULT_NAMESPACE",
        "DEFAULT_STOP_TIMEOUT",
        "DEFAULT_SUBNET",
        "NAMESPACE_ENV",
        "SUBNET_ENV",
    ),
    "ctrexec.doctor.checks": ("Failure", "GcReport", "doctor", "gc"),
    "ctrexec.doctor.findings": ("Check", "Finding", "Scope"),
    "ctrexec.doctor.nomadsockets": ("sweep_nomad_sockets",),
    "ctrexec.doctor.prune": (
        "ContainerFilter",
        "ContainerPruneReport",
        "SystemPruneReport",
        "prune_containers",
        "prune_system",
    ),
    "ctrexec.errors": (
        "AlreadyExists",
        "AlreadyRunning",
        "AmbiguousPrefix",
        "CNIError",
        "Canceled",
        "CommandNotExecutable",
        "CommandNotFound",
        "Conflict",
        "ConnectError",
        "CtrexecError",
        "DaemonError",
        "DeadlineExceeded",
        "DigestMismatch",
        "FailedPrecondition",
        "HandleMismatch",
        "Internal",
        "InvalidArgument",
        "InvalidField",
        "MissingArguments",
        "NetworkError",
        "NotATerminal",
        "NotFound",
        "NotModified",
        "PermissionDenied",
        "RegistryError",
        "RegistryRefused",
        "ResourceExhausted",
        "TaskError",
        "Unavailable",
        "Unimplemented",
        "UnknownCommand",
    ),
    "ctrexec.groups.presence": ("is_supervised",),
    "ctrexec.groups.spec": ("GroupSpec", "load_group_file", "parse_group"),
    "ctrexec.groups.supervisor": ("Supervisor",),
    "ctrexec.groups.updown": ("Groups",),
    "ctrexec.images.commit": ("check_changes", "commit_container"),
    "ctrexec.images.exporter": ("export_archive",),
    "ctrexec.images.importer": ("ImportedImage", "import_archive"),
    "ctrexec.images.lookup": ("ensure_image", "get_image"),
    "ctrexec.images.prune": ("PruneReport", "prune_images"),
    "ctrexec.images.reference": ("Reference", "normalize_reference", "parse_reference"),
    "ctrexec.images.registry.auth": (
        "RegistryCredentials=Credentials",
        "credentials_from_helper",
        "registry_logout=erase",
    ),
    "ctrexec.images.registry.client": ("registry_login=login",),
    "ctrexec.images.registry.pull": ("PullEvent", "ensure_pulled", "pull"),
    "ctrexec.images.registry.push": ("PushResult", "push"),
    "ctrexec.images.tagging": ("tag_image",),
    "ctrexec.images.usage": ("image_usage", "remove_image", "resolve_image"),
    "ctrexec.logs.modes": ("LOG_DRIVERS=DRIVERS", "parse_log_opts"),
    "ctrexec.logs.reader": ("LogEntry", "read_logs", "read_task_logs"),
    "ctrexec.net.cni": ("PortMapping",),
    "ctrexec.net.cniconf": ("CNIAttachment", "PluginCall"),
    "ctrexec.net.hostfiles": ("ResolvConf=Resolver", "host_resolver"),
    "ctrexec.net.netns": (
        "NetNS",
        "create_netns=create",
        "list_netns=list_namespaces",
        "remove_netns=remove",
    ),
    "ctrexec.net.networks": ("Attachment", "Networks"),
    "ctrexec.net.nsinfo": ("Address", "Interface", "NetNSInfo", "Route", "inspect_netns=inspect"),
    "ctrexec.net.nsrefs": ("NetnsUsage", "NetnsUser", "netns_usage=usage"),
    "ctrexec.net.settings": ("networks_from_env=from_env",),
    "ctrexec.oci.caps": ("DEFAULT_CAPABILITIES", "normalize_capability"),
    "ctrexec.oci.mounts": ("Mount",),
    "ctrexec.paths": ("StrPath",),
    "ctrexec.placement": ("helper_argv", "helper_placed"),
    "ctrexec.preloading": ("preload",),
    "ctrexec.tasks.aio": ("AsyncExecutor",),
    "ctrexec.tasks.cgroupfs": ("cgroupfs_relative",),
    "ctrexec.tasks.config": ("RestartPolicy", "TaskConfig"),
    "ctrexec.tasks.reports": ("TaskHandle", "TaskInfo"),
    "ctrexec.tasks.events": ("EventFilter", "TaskEvents"),
    "ctrexec.tasks.executor": ("Executor",),
    "ctrexec.tasks.info": ("inspect_task=inspect", "list_tasks=list_infos"),
    "ctrexec.tasks.nomadtasks": ("NomadTask", "nomad_labels", "nomad_task_id", "nomad_tasks"),
    "ctrexec.tasks.envfile": ("read_env_files",),
    "ctrexec.tasks.procs": ("TaskProcess=Proc",),
    "ctrexec.tasks.publishing": ("NetworkRequest",),
    "ctrexec.tasks.rename": ("rename",),
    "ctrexec.tasks.volumes": ("Volume", "Volumes"),
}
#: Each public name: (its module, its name there).
_MODULE_OF = {
    public: (module, attribute or public)
    for module, entries in _WHERE.items()
    for public, _, attribute in (entry.partition("=") for entry in entries)
}
# Hidden from mypy, which would take a computed ``__all__`` for an empty one (it reads
# the ``TYPE_CHECKING`` imports' re-exports instead).
if not TYPE_CHECKING:
    __all__ = sorted(_MODULE_OF)  # noqa: PLE0605 - made from _WHERE, the one list


def __getattr__(name: str) -> object:
    where = _MODULE_OF.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = where
    value = getattr(__import__(module, fromlist=(attribute,)), attribute)  # not importlib: 0.4 ms
    globals()[name] = value  # later lookups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULE_OF))


class _Package(ModuleType):
    """``doctor`` is a public function and the name of the subpackage that defines it.
    The import system sets a package's attribute to each subpackage it loads, so
    ``from ctrexec import gc, doctor`` (or any name of ``ctrexec.doctor`` first) gave the
    module, not the function. That setting of a public name is dropped: the subpackage
    is still imported by its dotted name (``from ctrexec.doctor.checks import ...``),
    which goes through ``sys.modules``."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _MODULE_OF and isinstance(value, ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
