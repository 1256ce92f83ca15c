"""docker's ``--security-opt``: ``no-new-privileges`` and ``seccomp``, parsed and applied.

Accepted, as docker writes them: ``no-new-privileges`` (``=true``/``=false``, or docker's
old ``:`` spelling), ``seccomp=unconfined`` and ``seccomp=PATH``. AppArmor and SELinux
labels are refused: ctrexec sets neither.

A profile file is docker's format (which an OCI ``linux.seccomp`` object also fits):
``archMap`` picks the architectures of this host's machine, and a rule's
``includes``/``excludes`` are judged against the task's bounding capabilities and the
machine, as dockerd does (``minKernel`` is not judged: the rule is kept). The file is
read by the caller; everything here is pure.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ctrexec.errors import InvalidArgument
from ctrexec.oci._base import Spec, SpecOpt, linux_of, mutating, process_of
from ctrexec.oci.seccomp import host_machine, validate_profile

_TRUTH = {"true": True, "1": True, "false": False, "0": False}


@attrs.frozen
class SecurityOpts:
    """What the options asked for: None leaves ctrexec's default."""

    no_new_privileges: bool | None = None
    #: ``unconfined``, or the path of a profile file.
    seccomp: str | None = None


def parse_security_opts(opts: Sequence[str]) -> SecurityOpts:
    """docker's ``--security-opt`` values; a later one of a kind wins."""
    nnp: bool | None = None
    seccomp: str | None = None
    for opt in opts:
        if opt == "no-new-privileges":
            nnp = True
            continue
        key, sep, value = opt.partition("=")
        if not sep and opt.startswith("no-new-privileges:"):
            key, sep, value = opt.partition(":")
        if not sep:
            raise InvalidArgument(f'invalid --security-opt 1: "{opt}"')
        if key == "no-new-privileges":
            if value.lower() not in _TRUTH:
                raise InvalidArgument(f'invalid --security-opt 2: "{opt}"')
            nnp = _TRUTH[value.lower()]
        elif key == "seccomp":
            if not value:
                raise InvalidArgument(f'invalid --security-opt 2: "{opt}"')
            seccomp = value
        elif key in ("apparmor", "label", "systempaths", "writable-cgroups"):
            raise InvalidArgument(f"--security-opt {key} is not supported by ctrexec")
        else:
            raise InvalidArgument(f'Invalid --security-opt: "{opt}"')
    return SecurityOpts(no_new_privileges=nnp, seccomp=seccomp)


#: This host's machine as Go spells it (docker's profiles name arches that way), and its
#: native SCMP architecture (what ``archMap`` entries are picked by).
_GO_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
_SCMP_ARCH = {"x86_64": "SCMP_ARCH_X86_64", "aarch64": "SCMP_ARCH_AARCH64"}


def _kept(rule: Mapping[str, Any], caps: set[str], arch: str) -> bool:
    """dockerd's judgement of a rule: excluded by any listed cap held or its arch,
    included only with every listed cap held and on a listed arch."""
    excludes = rule.get("excludes") or {}
    if arch in (excludes.get("arches") or []) or caps & set(excludes.get("caps") or []):
        return False
    includes = rule.get("includes") or {}
    if includes.get("arches") and arch not in includes["arches"]:
        return False
    return set(includes.get("caps") or []) <= caps


def oci_profile(
    profile: Mapping[str, Any], capabilities: Sequence[str], *, machine: str | None = None
) -> dict[str, Any]:
    """A docker-format profile as the OCI ``linux.seccomp`` object for this task."""
    if not isinstance(profile, Mapping):
        raise InvalidArgument("seccomp profile must be a JSON object")
    machine = machine or host_machine()
    if profile.get("architectures") and profile.get("archMap"):
        raise InvalidArgument(
            "both 'architectures' and 'archMap' are specified in the seccomp profile, "
            "use either 'architectures' or 'archMap'"
        )
    out: dict[str, Any] = {"defaultAction": profile.get("defaultAction")}
    for key in ("defaultErrnoRet", "flags", "listenerPath", "listenerMetadata"):
        if key in profile:
            out[key] = copy.deepcopy(profile[key])
    arches = list(profile.get("architectures") or [])
    for entry in profile.get("archMap") or []:
        if isinstance(entry, Mapping) and entry.get("architecture") == _SCMP_ARCH.get(machine):
            arches += [entry["architecture"], *(entry.get("subArchitectures") or [])]
    out["architectures"] = arches
    caps, arch = set(capabilities), _GO_ARCH.get(machine, machine)
    rules = []
    for rule in profile.get("syscalls") or []:
        if not isinstance(rule, Mapping):
            raise InvalidArgument("each seccomp syscall rule must be an object")
        if not _kept(rule, caps, arch):
            continue
        names = rule.get("names") or ([rule["name"]] if rule.get("name") else [])
        kept = {"names": names, "action": rule.get("action")}
        for key in ("args", "errnoRet"):
            if rule.get(key) is not None:
                kept[key] = copy.deepcopy(rule[key])
        rules.append(kept)
    out["syscalls"] = rules
    validate_profile(out)
    return out


def with_seccomp_profile(profile: Mapping[str, Any]) -> SpecOpt:
    """``--security-opt seccomp=FILE``: the file's profile, judged against the task's
    bounding capabilities as they are when this option is applied (apply it after them)."""
    oci_profile(profile, [])  # its shape, refused before anything is built

    def apply(spec: Spec) -> None:
        caps = (process_of(spec).get("capabilities") or {}).get("bounding") or []
        linux_of(spec)["seccomp"] = oci_profile(profile, caps)

    return mutating(apply)
