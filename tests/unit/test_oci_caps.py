"""Capability names, add/drop/set, and the seccomp profile following the set."""

from __future__ import annotations

import pytest

from ctrexec.errors import InvalidArgument
from ctrexec.oci import (
    ALL_CAPABILITIES,
    DEFAULT_CAPABILITIES,
    bounding_capabilities,
    build_spec,
    capabilities_from_mask,
    load_default_profile,
    normalize_capability,
    with_added_capabilities,
    with_capabilities,
    with_dropped_capabilities,
    with_seccomp,
)

pytestmark = pytest.mark.unit


def _caps(spec: dict[str, object]) -> list[str]:
    capabilities = spec["process"]["capabilities"]  # type: ignore[index]
    sets = {name: capabilities[name] for name in ("bounding", "effective", "permitted")}
    assert sets["bounding"] == sets["effective"] == sets["permitted"]
    assert capabilities["inheritable"] == capabilities["ambient"] == []
    return list(sets["bounding"])


def _syscalls(spec: dict[str, object]) -> set[str]:
    rules = spec["linux"]["seccomp"]["syscalls"]  # type: ignore[index]
    return {n for r in rules if r["action"] == "SCMP_ACT_ALLOW" for n in r["names"]}


def test_capability_lists() -> None:
    assert len(ALL_CAPABILITIES) == 41
    assert ALL_CAPABILITIES[0] == "CAP_CHOWN"
    assert ALL_CAPABILITIES[21] == "CAP_SYS_ADMIN"
    assert ALL_CAPABILITIES[40] == "CAP_CHECKPOINT_RESTORE"
    assert len(DEFAULT_CAPABILITIES) == 14
    assert set(DEFAULT_CAPABILITIES) <= set(ALL_CAPABILITIES)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("NET_ADMIN", "CAP_NET_ADMIN"),
        ("CAP_NET_ADMIN", "CAP_NET_ADMIN"),
        ("net_admin", "CAP_NET_ADMIN"),
        (" cap_sys_ptrace ", "CAP_SYS_PTRACE"),
        ("ALL", "ALL"),
        ("all", "ALL"),
    ],
)
def test_normalize_capability(given: str, expected: str) -> None:
    assert normalize_capability(given) == expected


@pytest.mark.parametrize("bad", ["", "NET_ADMINN", "CAP_", "SYS ADMIN", "CAP_FOO"])
def test_unknown_capabilities_are_refused(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        normalize_capability(bad)
    with pytest.raises(InvalidArgument):
        with_added_capabilities([bad])


def test_a_single_string_is_refused() -> None:
    # "NET_ADMIN" iterated would be letters; refuse rather than guess.
    with pytest.raises(InvalidArgument):
        with_added_capabilities("NET_ADMIN")


def test_add_capabilities() -> None:
    caps = _caps(build_spec(with_added_capabilities(["NET_ADMIN", "CAP_SYS_TIME"])))
    assert "CAP_NET_ADMIN" in caps
    assert "CAP_SYS_TIME" in caps
    assert set(DEFAULT_CAPABILITIES) <= set(caps)
    assert len(caps) == 16


def test_add_is_idempotent() -> None:
    once = build_spec(with_added_capabilities(["NET_ADMIN"]))
    twice = build_spec(
        with_added_capabilities(["NET_ADMIN"]), with_added_capabilities(["NET_ADMIN"])
    )
    assert once == twice


def test_drop_capabilities() -> None:
    caps = _caps(build_spec(with_dropped_capabilities(["NET_RAW", "CAP_MKNOD"])))
    assert "CAP_NET_RAW" not in caps
    assert "CAP_MKNOD" not in caps
    assert len(caps) == 12


def test_drop_all_then_add_keeps_only_added() -> None:
    spec = build_spec(
        with_dropped_capabilities(["ALL"]), with_added_capabilities(["NET_BIND_SERVICE"])
    )
    assert _caps(spec) == ["CAP_NET_BIND_SERVICE"]


def test_add_all() -> None:
    assert _caps(build_spec(with_added_capabilities(["ALL"]))) == list(ALL_CAPABILITIES)


def test_with_capabilities_sets_exactly() -> None:
    assert _caps(build_spec(with_capabilities(["KILL", "CHOWN"]))) == ["CAP_CHOWN", "CAP_KILL"]
    assert _caps(build_spec(with_capabilities([]))) == []


def test_default_profile_follows_added_capability() -> None:
    assert "ptrace" not in _syscalls(build_spec())
    spec = build_spec(with_added_capabilities(["SYS_PTRACE"]))
    assert {"ptrace", "process_vm_readv"} <= _syscalls(spec)
    assert spec["linux"]["seccomp"] == load_default_profile(capabilities=_caps(spec))


def test_default_profile_follows_dropped_capability() -> None:
    assert "chroot" in _syscalls(build_spec())
    assert "chroot" not in _syscalls(build_spec(with_dropped_capabilities(["SYS_CHROOT"])))


def test_custom_profile_is_not_touched_by_capability_options() -> None:
    custom = {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": []}
    spec = build_spec(with_seccomp(custom), with_added_capabilities(["SYS_ADMIN"]))
    assert spec["linux"]["seccomp"] == custom
    unconfined = build_spec(with_seccomp(None), with_added_capabilities(["SYS_ADMIN"]))
    assert "seccomp" not in unconfined["linux"]


def test_capabilities_from_mask() -> None:
    # Docker's default set as /proc/<pid>/status shows it.
    assert set(capabilities_from_mask(0xA80425FB)) == set(DEFAULT_CAPABILITIES)
    assert capabilities_from_mask(0) == []
    assert capabilities_from_mask((1 << 41) - 1) == list(ALL_CAPABILITIES)


def test_bounding_capabilities_parses_status() -> None:
    status = "Name:\tx\nCapInh:\t0000000000000000\nCapBnd:\t000001fffeffffff\n"
    caps = bounding_capabilities(status)
    assert "CAP_SYS_RESOURCE" not in caps  # bit 24 clear, as in a sandboxed runtime
    assert len(caps) == 40
    with pytest.raises(InvalidArgument):
        bounding_capabilities("Name:\tx\n")
    with pytest.raises(TypeError):
        bounding_capabilities()  # type: ignore[call-arg]  # oci reads no /proc file
