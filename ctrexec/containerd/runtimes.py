"""Choosing the OCI runtime by name, without editing containerd's config.

containerd's runc v2 shim can run any runc-compatible binary (crun, runsc, youki)
through its ``BinaryName`` option, so ``--runtime crun`` needs no daemon change. A
full shim name (``io.containerd.kata.v2``) is accepted when its shim binary is on
PATH. Anything else is refused before a container is created.
"""

from __future__ import annotations

import functools
import shutil

import attrs
from google.protobuf import any_pb2

from ctrexec._api.runc.options import oci_pb2
from ctrexec.containerd.containers import Runtime
from ctrexec.errors import InvalidArgument

RUNC_V2 = "io.containerd.runc.v2"
RUNC_OPTIONS_TYPE_URL = "containerd.runc.v1.Options"
#: runc-compatible binaries the runc v2 shim can drive.
OCI_BINARIES = ("runc", "crun", "runsc", "youki")


@attrs.frozen
class RuntimeChoice:
    """What ``--runtime`` resolved to: the shim and, for runc v2, the binary."""

    shim: str
    binary: str | None = None

    def to_runtime(self) -> Runtime:
        return _runtime_of(self)

    def _build(self) -> Runtime:
        if self.shim != RUNC_V2 or self.binary in (None, "runc"):
            return Runtime(name=self.shim)
        opts = oci_pb2.Options(binary_name=self.binary or "")
        return Runtime(
            name=self.shim,
            options=any_pb2.Any(type_url=RUNC_OPTIONS_TYPE_URL, value=opts.SerializeToString()),
        )


@functools.cache
def _runtime_of(choice: RuntimeChoice) -> Runtime:
    """Built once per choice: the options never change, and the record copies them."""
    return choice._build()


def shim_binary(shim: str) -> str:
    """``io.containerd.runc.v2`` -> ``containerd-shim-runc-v2`` (containerd's own rule)."""
    parts = shim.split(".")
    if len(parts) < 4 or parts[0] != "io" or parts[1] != "containerd":
        raise InvalidArgument(f"invalid runtime name {shim!r}")
    return "containerd-shim-" + "-".join(parts[2:])


@functools.cache
def resolve(name: str | None) -> RuntimeChoice:
    """Resolve ``--runtime``; refuse a runtime whose binary is not installed.

    Cached per process: a start looks up PATH once per runtime name, not twice per
    task. A refusal raises and so is never cached (a binary installed later works);
    one uninstalled later fails at Tasks.Create, with runc's own message."""
    if not name or name == "runc":
        name = "runc"
    if name in OCI_BINARIES or "/" in name:
        binary = name
        if shutil.which(binary) is None:
            raise InvalidArgument(f"unknown runtime {name!r}: {binary} is not installed")
        if shutil.which(shim_binary(RUNC_V2)) is None:
            raise InvalidArgument("containerd-shim-runc-v2 is not installed")
        return RuntimeChoice(shim=RUNC_V2, binary=binary)
    if name.startswith("io.containerd."):
        shim = shim_binary(name)
        if shutil.which(shim) is None:
            raise InvalidArgument(f"unknown runtime {name!r}: {shim} is not installed")
        return RuntimeChoice(shim=name)
    raise InvalidArgument(
        f"unknown runtime {name!r}: use one of {', '.join(OCI_BINARIES)} or io.containerd.NAME.vN"
    )
