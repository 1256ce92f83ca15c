"""Wire conformance of ctrexec's protos/ against containerd 2.x's API protos.

The same element-by-element comparison as test_wire_conformance.py (1.6's gogo-based
protos), against containerd 2.1's api module: Debian's
golang-github-containerd-containerd-api-dev, which ``scripts/fetch-containerd
2.1-api`` unpacks into .containerd/2.1-api/ (no install). 2.x's protos import
google/protobuf's well-known types instead of gogo; google/rpc/status.proto still
comes from Debian's gogo googleapis package (the same message, no gogo option).

Every difference is either handled or listed: :data:`RENAMED_IN_2X` is compared
under its 1.x name, and :data:`KNOWN_2X_DIFFERENCES` holds each drift line with why
ctrexec does not follow it. Any other drift fails, and so does a listed line that no
longer differs.

Where the tree comes from: the test runs ``scripts/fetch-containerd 2.1-api`` itself
each time. With the tree in place the script only prints its root (no network); on a
fresh checkout it downloads the package once. So the location has one owner (the
script), CI needs no step of its own, and CI cannot pass without the comparison: a
failed fetch skips the tests, except with CI=true, where it fails them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from _wirecmp import (
    OUR_PREFIX,
    OUR_PROTOS,
    REPO,
    SERVICES,
    build_index,
    compare,
    compare_files,
    compile_set,
    fail_on,
    our_proto_files,
    rename_messages,
    unexplained,
)
from google.protobuf import descriptor_pb2 as d

pytestmark = pytest.mark.unit

FETCH = ("bash", str(REPO / "scripts/fetch-containerd"), "2.1-api")
#: google/rpc/status.proto, which the api module imports but does not carry.
GOOGLEAPIS = Path("/usr/share/gocode/src/github.com/gogo/googleapis")
_CTRD = "github.com/containerd/containerd/api/"
_OURS = OUR_PREFIX + "containerd/"

# Our file (relative to protos/) -> the 2.x file it mirrors. None: not in containerd's
# api module (the cgroups metrics are their own module; test_wire_conformance.py
# checks them against Debian's containerd/cgroups package).
FILE_MAP_2X: dict[str, str | None] = {
    **{
        f"{_OURS}types/{n}.proto": f"{_CTRD}types/{n}.proto"
        for n in ("descriptor", "introspection", "metrics", "mount", "platform", "task/task")
    },
    **{
        f"{_OURS}events/{n}.proto": f"{_CTRD}events/{n}.proto"
        for n in ("container", "content", "image", "namespace", "snapshot", "task")
    },
    **{
        f"{_OURS}services/{svc}/v1/{base}.proto": f"{_CTRD}services/{svc}/v1/{base}.proto"
        for svc, base in SERVICES
    },
    # 2.x moved runc's options into the api module; same package, containerd.runc.v1.
    f"{OUR_PREFIX}runc/options/oci.proto": f"{_CTRD}types/runc/options/oci.proto",
    f"{OUR_PREFIX}google/rpc/status.proto": "google/rpc/status.proto",
    f"{OUR_PREFIX}cgroups/v1/metrics.proto": None,
    f"{OUR_PREFIX}cgroups/v2/metrics.proto": None,
}

#: Messages 2.x moved to another package but kept field for field, compared under
#: ctrexec's (1.x) name. Events.Subscribe returns containerd.types.Envelope in 2.x
#: (api/types/event.proto) and containerd.services.events.v1.Envelope in 1.x: the same
#: fields and numbers, so the same bytes. A message's name reaches the wire only in an
#: Any's type URL, and no Any carries an Envelope; the method path
#: (/containerd.services.events.v1.Events/Subscribe) is unchanged.
RENAMED_IN_2X = {"containerd.types.Envelope": "containerd.services.events.v1.Envelope"}

_DIFF = "containerd.services.diff.v1"
_IMAGES = "containerd.services.images.v1"
_RUNC = "containerd.runc.v1.Options"
_UNUSED = "2.x addition ctrexec does not use; a 2.x server leaves it unset or at its default"

#: Every difference between ctrexec's protos and 2.x's, line -> why ctrexec keeps it.
#: A 2.x field ctrexec lacks is skipped when decoding (an unknown field) and never
#: sent, so the server sees its zero value, which is 1.x's behaviour.
KNOWN_2X_DIFFERENCES: dict[str, str] = {
    # Snapshot events name the snapshotter; ctrexec reads no snapshot event's fields.
    **{
        f"field containerd.events.Snapshot{e}.snapshotter: present upstream, missing in ctrexec": (
            _UNUSED
        )
        for e in ("Commit", "Prepare", "Remove")
    },
    # The sandbox API (a container's sandbox id); ctrexec has no sandboxes.
    "field containerd.services.containers.v1.Container.sandbox: "
    "present upstream, missing in ctrexec": _UNUSED,
    # Reproducible-build knobs and a sync after apply; ctrexec sets neither.
    f"field {_DIFF}.ApplyRequest.sync_fs: present upstream, missing in ctrexec": _UNUSED,
    f"field {_DIFF}.DiffRequest.source_date_epoch: present upstream, missing in ctrexec": (_UNUSED),
    **{
        f"field {_IMAGES}.{m}ImageRequest.source_date_epoch: "
        "present upstream, missing in ctrexec": _UNUSED
        for m in ("Create", "Update")
    },
    # Windows' OS version in a platform; ctrexec runs linux images only.
    "field containerd.types.Platform.os_version: present upstream, missing in ctrexec": _UNUSED,
    # runc shim options: 2.x's task API address and version (for shims of other
    # transports); ctrexec sets only binary_name.
    f"field {_RUNC}.task_api_address: present upstream, missing in ctrexec": _UNUSED,
    f"field {_RUNC}.task_api_version: present upstream, missing in ctrexec": _UNUSED,
    # 2.x removed criu_path (field 8, now a comment upstream); ctrexec keeps it for 1.x
    # and never sets it, so nothing of it is on the wire.
    f"field {_RUNC}.criu_path: no upstream counterpart": "1.x only; never set by ctrexec",
    # A content event 2.x adds (a blob committed); ctrexec subscribes to no content event.
    f"{_OURS}events/content.proto: top-level message ContentCreate: "
    "present upstream, missing in ctrexec": _UNUSED,
    # Envelope moved to types/event.proto (RENAMED_IN_2X); the file no longer holds it.
    f"{_OURS}services/events/v1/events.proto: top-level message Envelope: no upstream counterpart": (
        "compared as containerd.types.Envelope (RENAMED_IN_2X)"
    ),
}

#: 2.x services ctrexec does not mirror: it runs no sandboxes, moves images with its
#: own client (no Transfer), and has no use for Streaming (Transfer's streams).
UNMIRRORED_2X_SERVICES = {
    "containerd.services.sandbox.v1.Controller": "sandbox API: no sandboxes in ctrexec",
    "containerd.services.sandbox.v1.Store": "sandbox API: no sandboxes in ctrexec",
    "containerd.services.streaming.v1.Streaming": "used by Transfer only",
    "containerd.services.transfer.v1.Transfer": "ctrexec pulls, imports and exports itself",
}


def api_2x_root() -> Path:
    """The root 2.x's protos are found under, from the fetch script's last line."""
    proc = subprocess.run(FETCH, capture_output=True, text=True, check=False)
    lines = proc.stdout.strip().splitlines()
    root = Path(lines[-1]) if proc.returncode == 0 and lines else None
    if root is not None and (root / _CTRD).is_dir() and GOOGLEAPIS.is_dir():
        return root
    msg = (
        f"containerd 2.x protos unavailable ({' '.join(FETCH[1:])}: exit {proc.returncode}; "
        f"{proc.stderr.strip()[-400:]}; googleapis at {GOOGLEAPIS}: {GOOGLEAPIS.is_dir()})"
    )
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(msg + " (CI=true: the 2.x conformance check must run)")
    pytest.skip(msg)


def upstream_2x_files(root: Path) -> list[str]:
    """Every file of the api module but the shim-side ttrpc APIs (runtime/, ttrpc/)."""
    api = root / _CTRD
    skip = {"ttrpc", "runtime"}
    files = sorted(
        p.relative_to(root).as_posix()
        for p in api.rglob("*.proto")
        if not skip & set(p.relative_to(api).parts)
    )
    return [*files, "google/rpc/status.proto"]


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> d.FileDescriptorSet:
    out = tmp_path_factory.mktemp("ours2x") / "ours.pb"
    return compile_set([OUR_PROTOS], our_proto_files(), out)


@pytest.fixture(scope="module")
def upstream_2x(tmp_path_factory: pytest.TempPathFactory) -> d.FileDescriptorSet:
    root = api_2x_root()
    out = tmp_path_factory.mktemp("upstream2x") / "upstream.pb"
    return compile_set([root, GOOGLEAPIS], upstream_2x_files(root), out)


def _drift_2x(ours: d.FileDescriptorSet, upstream: d.FileDescriptorSet) -> list[str]:
    o = build_index(ours, only_prefix=OUR_PREFIX)
    # the cgroups metrics are not 2.x's api module (FILE_MAP_2X)
    for name in [
        n for n, (_, f) in o.messages.items() if f.name.startswith(f"{OUR_PREFIX}cgroups/")
    ]:
        del o.messages[name]
    u = rename_messages(upstream, RENAMED_IN_2X)
    return compare(o, u) + compare_files(o, u, FILE_MAP_2X)


def test_file_map_2x_covers_every_proto() -> None:
    assert sorted(FILE_MAP_2X) == our_proto_files()


def test_wire_identical_to_2x_but_the_known_differences(
    ours: d.FileDescriptorSet, upstream_2x: d.FileDescriptorSet
) -> None:
    fail_on(
        unexplained(_drift_2x(ours, upstream_2x), KNOWN_2X_DIFFERENCES),
        "ctrexec protos vs containerd 2.x",
    )


def test_envelope_is_compared_under_its_1x_name(
    ours: d.FileDescriptorSet, upstream_2x: d.FileDescriptorSet
) -> None:
    u = rename_messages(upstream_2x, RENAMED_IN_2X)
    env = "containerd.services.events.v1.Envelope"
    theirs, where = u.messages[env]
    assert where.name == f"{_CTRD}types/event.proto"
    assert [(f.name, f.number) for f in theirs.field] == [
        (f.name, f.number) for f in build_index(ours).messages[env][0].field
    ]
    (subscribe,) = [
        m for m in u.services["containerd.services.events.v1.Events"][0].method
        if m.name == "Subscribe"
    ]  # fmt: skip
    assert subscribe.output_type == f".{env}"


def test_2x_services_are_mirrored_or_listed(
    ours: d.FileDescriptorSet, upstream_2x: d.FileDescriptorSet
) -> None:
    o = build_index(ours, only_prefix=OUR_PREFIX)
    u = build_index(upstream_2x, only_prefix=f"{_CTRD}services/")
    missing = {name: "" for name in u.services.keys() - o.services.keys()}
    fail_on(unexplained(missing, UNMIRRORED_2X_SERVICES), "containerd 2.x services")


# ---- the list logic itself (no upstream needed)


def test_unexplained_reports_new_and_stale_lines() -> None:
    known = {"a: differs": "why", "b: differs": "why"}
    assert unexplained(["a: differs", "c: differs"], known) == [
        "not in the known list: c: differs",
        "known but no longer found: b: differs",
    ]
    assert unexplained(["a: differs", "b: differs"], known) == []


def test_rename_rewrites_references_and_the_index(ours: d.FileDescriptorSet) -> None:
    old, new = "containerd.services.events.v1.Envelope", "containerd.types.Envelope"
    idx = rename_messages(ours, {old: new})
    assert new in idx.messages and old not in idx.messages
    fwd = idx.messages["containerd.services.events.v1.ForwardRequest"][0]
    assert [f.type_name for f in fwd.field if f.name == "envelope"] == [f".{new}"]
