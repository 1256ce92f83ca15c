"""Pure builders for the OCI runtime spec that containerd hands to runc.

The spec is a JSON-shaped ``dict``. Options are functions ``with_*(...)`` that
return a :data:`SpecOpt`: a function from a spec to a *new* spec (the input is
never modified). :func:`build_spec` starts from :func:`default_spec` and applies
options in order::

    spec = build_spec(
        with_args(resolve_args(img.entrypoint, img.cmd, user_cmd=["sh"])),
        with_env(img.env),
        with_env(user_env),
        with_network_namespace("/run/netns/group-a"),
        with_memory_limit("512m"),
    )

Nothing here reads a file (only this package's own seccomp profile data) or calls
libc: the caller reads passwd/group from the image and the capability bounding
set from /proc and passes their text in (``ctrexec.tasks.spec``, ``ctrexec.tasks.executor``).
Every function is pure except :func:`validate_mount_sources` (looks up host paths)
and :func:`with_devices` (stats host devices when the option is made).
Bad input raises :class:`ctrexec.errors.InvalidArgument`.
"""

from __future__ import annotations

from ctrexec.oci._base import Spec, SpecOpt, apply_opts
from ctrexec.oci.caps import (
    ALL_CAPABILITIES,
    DEFAULT_CAPABILITIES,
    bounding_capabilities,
    capabilities_from_mask,
    expand_capabilities,
    normalize_capability,
    with_added_capabilities,
    with_capabilities,
    with_dropped_capabilities,
)
from ctrexec.oci.mounts import (
    DEFAULT_PROTECTED_PATHS,
    Device,
    Mount,
    check_mount_source,
    parse_device,
    parse_mount,
    parse_tmpfs,
    parse_volume,
    validate_mount_sources,
    with_bind_mount,
    with_devices,
    with_mount,
    with_mounts,
    with_readonly_rootfs,
    with_tmpfs,
)
from ctrexec.oci.namespaces import (
    NAMESPACE_TYPES,
    find_namespace,
    with_host_namespace,
    with_host_network,
    with_hostname,
    with_namespace,
    with_network_namespace,
    with_sysctls,
)
from ctrexec.oci.privileged import with_privileged
from ctrexec.oci.process import (
    DEFAULT_PATH,
    merge_env,
    resolve_args,
    with_args,
    with_cwd,
    with_env,
    with_no_new_privileges,
    with_oom_score_adj,
    with_rlimits,
    with_tty,
    with_user_ids,
)
from ctrexec.oci.resources import (
    MIN_MEMORY_BYTES,
    parse_size,
    with_cgroups_path,
    with_cpu_shares,
    with_cpus,
    with_cpuset,
    with_memory_limit,
    with_memory_reservation,
    with_memory_swap,
    with_pids_limit,
)
from ctrexec.oci.seccomp import (
    load_default_profile,
    validate_profile,
    with_default_seccomp,
    with_seccomp,
)
from ctrexec.oci.spec import OCI_VERSION, build_spec, default_spec, with_annotations
from ctrexec.oci.user import (
    ResolvedUser,
    parse_group,
    parse_passwd,
    resolve_user_spec,
)

__all__ = [
    "ALL_CAPABILITIES",
    "DEFAULT_CAPABILITIES",
    "DEFAULT_PATH",
    "DEFAULT_PROTECTED_PATHS",
    "MIN_MEMORY_BYTES",
    "NAMESPACE_TYPES",
    "OCI_VERSION",
    "Device",
    "Mount",
    "ResolvedUser",
    "Spec",
    "SpecOpt",
    "apply_opts",
    "bounding_capabilities",
    "build_spec",
    "capabilities_from_mask",
    "check_mount_source",
    "default_spec",
    "expand_capabilities",
    "find_namespace",
    "load_default_profile",
    "merge_env",
    "normalize_capability",
    "parse_device",
    "parse_group",
    "parse_mount",
    "parse_passwd",
    "parse_size",
    "parse_tmpfs",
    "parse_volume",
    "resolve_args",
    "resolve_user_spec",
    "validate_mount_sources",
    "validate_profile",
    "with_added_capabilities",
    "with_annotations",
    "with_args",
    "with_bind_mount",
    "with_capabilities",
    "with_cgroups_path",
    "with_cpu_shares",
    "with_cpus",
    "with_cpuset",
    "with_cwd",
    "with_default_seccomp",
    "with_devices",
    "with_dropped_capabilities",
    "with_env",
    "with_host_namespace",
    "with_host_network",
    "with_hostname",
    "with_memory_limit",
    "with_memory_reservation",
    "with_memory_swap",
    "with_mount",
    "with_mounts",
    "with_namespace",
    "with_network_namespace",
    "with_no_new_privileges",
    "with_oom_score_adj",
    "with_pids_limit",
    "with_privileged",
    "with_readonly_rootfs",
    "with_rlimits",
    "with_seccomp",
    "with_sysctls",
    "with_tmpfs",
    "with_tty",
    "with_user_ids",
]
