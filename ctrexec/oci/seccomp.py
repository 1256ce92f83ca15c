"""The default seccomp profile and the options that set or remove one.

containerd sets no seccomp profile by itself, so the executor has to. Ours lives
as data in ``seccomp_default.json`` (written for ctrexec; see its comment) and is
turned into the OCI ``linux.seccomp`` object here, for one host machine and one
capability set:

- a rule with ``caps`` is kept when the task holds any of those capabilities,
  so granting ``CAP_SYS_PTRACE`` also allows ``ptrace``;
- a rule with ``unlessCaps`` is kept only when the task holds none of them (the
  restricted ``clone`` gives way to the unrestricted one under CAP_SYS_ADMIN);
- a rule with ``arches`` is kept only on those machines.

Choices worth knowing:

- Everything unlisted fails with EPERM (``defaultErrnoRet`` 1).
- ``clone3`` fails with ENOSYS: its flags are in memory where seccomp cannot see
  them, and glibc falls back to ``clone``, whose flags we do check.
- ``ptrace`` is denied unless CAP_SYS_PTRACE is granted. Kernels since 4.8 no
  longer let ptrace bypass seccomp, and docker allows it there, but a scheduled
  task rarely needs a debugger and the smaller surface is worth more.
- Privileged tasks get no profile at all (see :func:`ctrexec.oci.with_privileged`).
"""

from __future__ import annotations

import copy
import functools
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ctrexec.errors import InvalidArgument
from ctrexec.oci._base import Spec, SpecOpt, linux_of, mutating, process_of

_DATA_FILE = "seccomp_default.json"

#: ``uname -m`` (``platform.machine()``) spellings mapped to the profile's machine keys.
_MACHINE_ALIASES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}

_ACTIONS = frozenset(
    {
        "SCMP_ACT_KILL",
        "SCMP_ACT_KILL_PROCESS",
        "SCMP_ACT_KILL_THREAD",
        "SCMP_ACT_TRAP",
        "SCMP_ACT_ERRNO",
        "SCMP_ACT_TRACE",
        "SCMP_ACT_ALLOW",
        "SCMP_ACT_LOG",
        "SCMP_ACT_NOTIFY",
    }
)


@functools.cache
def _profile_data() -> Mapping[str, Any]:
    """The parsed data file, read once per process."""
    # start-up: importlib.resources (pathlib, tempfile, zipfile) loads with the first
    # spec that has a seccomp profile, not with every reader of a TaskConfig
    from importlib import resources

    text = resources.files("ctrexec.oci").joinpath(_DATA_FILE).read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def host_machine() -> str:
    """This host's machine name as the profile spells it (``x86_64``, ``aarch64``...)."""
    machine = os.uname().machine.lower()  # what platform.machine() says on Linux
    return _MACHINE_ALIASES.get(machine, machine)


def _wanted(rule: Mapping[str, Any], caps: frozenset[str], machine: str) -> bool:
    if "caps" in rule and not caps.intersection(rule["caps"]):
        return False
    if caps.intersection(rule.get("unlessCaps", ())):
        return False
    return "arches" not in rule or machine in rule["arches"]


def load_default_profile(
    *, arch: str | None = None, capabilities: Iterable[str] = ()
) -> dict[str, Any]:
    """Build the default OCI seccomp object for machine ``arch`` and ``capabilities``.

    ``arch`` defaults to this host. On a machine the profile has no architecture
    list for, ``architectures`` is left empty, which runc reads as "native only";
    the portable rules still apply.
    """
    data = _profile_data()
    raw = (arch or host_machine()).lower()
    machine = _MACHINE_ALIASES.get(raw, raw)
    caps = frozenset(capabilities)
    syscalls: list[dict[str, Any]] = []
    for rule in data["rules"]:
        if not _wanted(rule, caps, machine):
            continue
        entry: dict[str, Any] = {"names": list(rule["names"]), "action": rule["action"]}
        if "errnoRet" in rule:
            entry["errnoRet"] = rule["errnoRet"]
        if "args" in rule:
            entry["args"] = copy.deepcopy(rule["args"])
        syscalls.append(entry)
    return {
        "defaultAction": data["defaultAction"],
        "defaultErrnoRet": data["defaultErrnoRet"],
        "architectures": list(data["architectures"].get(machine, [])),
        "syscalls": syscalls,
    }


def _machine_of(profile: Mapping[str, Any]) -> str | None:
    """Which machine's architecture list ``profile`` carries, if any of ours."""
    arches = list(profile.get("architectures") or [])
    for machine, listed in _profile_data()["architectures"].items():
        if arches == listed:
            return str(machine)
    return None


def is_default_profile(profile: Mapping[str, Any], capabilities: Iterable[str]) -> bool:
    """True when ``profile`` is exactly our default for ``capabilities``."""
    machine = _machine_of(profile) or host_machine()
    return dict(profile) == load_default_profile(arch=machine, capabilities=capabilities)


def refresh_default_seccomp(
    spec: Spec, *, old_caps: Iterable[str], new_caps: Iterable[str]
) -> None:
    """Regenerate a default profile in place after a capability change.

    Only a profile that is exactly our default for ``old_caps`` is touched, so a
    caller's own profile (or the absence of one) is never overridden.
    """
    profile = spec.get("linux", {}).get("seccomp")
    if not profile or not is_default_profile(profile, old_caps):
        return
    machine = _machine_of(profile) or host_machine()
    linux_of(spec)["seccomp"] = load_default_profile(arch=machine, capabilities=new_caps)


def validate_profile(profile: Mapping[str, Any]) -> None:
    """Check the shape of an OCI seccomp object well enough to fail before runc does."""
    if not isinstance(profile, Mapping):
        raise InvalidArgument("seccomp profile must be a JSON object")
    action = profile.get("defaultAction")
    if action not in _ACTIONS:
        raise InvalidArgument(f"seccomp profile has an invalid defaultAction {action!r}")
    arches = profile.get("architectures", [])
    if not isinstance(arches, list) or not all(
        isinstance(a, str) and a.startswith("SCMP_ARCH_") for a in arches
    ):
        raise InvalidArgument("seccomp architectures must be a list of SCMP_ARCH_* names")
    syscalls = profile.get("syscalls", [])
    if not isinstance(syscalls, list):
        raise InvalidArgument("seccomp syscalls must be a list")
    for rule in syscalls:
        if not isinstance(rule, Mapping):
            raise InvalidArgument("each seccomp syscall rule must be an object")
        names = rule.get("names")
        if (
            not isinstance(names, list)
            or not names
            or not all(isinstance(n, str) and n for n in names)
        ):
            raise InvalidArgument("each seccomp rule needs a non-empty list of syscall names")
        if rule.get("action") not in _ACTIONS:
            raise InvalidArgument(
                f"seccomp rule for {names[0]!r} has an invalid action {rule.get('action')!r}"
            )


def with_seccomp(profile: Mapping[str, Any] | None) -> SpecOpt:
    """Set ``profile`` as the task's seccomp filter, or remove the filter with None.

    None means unconfined: only :func:`with_privileged` and callers that mean it
    should pass it.
    """
    if profile is not None:
        validate_profile(profile)
    chosen = copy.deepcopy(dict(profile)) if profile is not None else None

    def apply(spec: Spec) -> None:
        linux = linux_of(spec)
        if chosen is None:
            linux.pop("seccomp", None)
        else:
            linux["seccomp"] = copy.deepcopy(chosen)

    return mutating(apply)


def with_default_seccomp(*, arch: str | None = None) -> SpecOpt:
    """Install our default profile for the spec's current capability set.

    Capability options already keep a default profile in step; this is for specs
    that had none or had a custom one.
    """

    def apply(spec: Spec) -> None:
        caps = (process_of(spec).get("capabilities") or {}).get("bounding") or []
        linux_of(spec)["seccomp"] = load_default_profile(arch=arch, capabilities=caps)

    return mutating(apply)
