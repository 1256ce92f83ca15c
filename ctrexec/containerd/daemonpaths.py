"""Where an embedded containerd keeps its root, state and socket.

A module of its own, apart from :mod:`ctrexec.containerd.daemon`: the client's address
rule (:class:`ctrexec.containerd.client.AddressChoice`) needs the embedded daemon's
socket, and the daemon module imports the client.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from ctrexec.defaults import EMBEDDED_DIR_ENV, RUN_DIR

if TYPE_CHECKING:
    from ctrexec.paths import StrPath

DEFAULT_STATE_DIR = Path(RUN_DIR, "containerd")
DEFAULT_ROOT_DIR = Path("/var/lib/ctrexec/containerd")


@attrs.frozen
class DaemonPaths:
    """Where one embedded containerd keeps everything."""

    root: Path = attrs.field(converter=Path)
    state: Path = attrs.field(converter=Path)

    @property
    def address(self) -> str:
        return str(self.state / "containerd.sock")

    @property
    def config(self) -> Path:
        return self.state / "config.toml"

    @property
    def pidfile(self) -> Path:
        return self.state / "containerd.pid"

    @property
    def log(self) -> Path:
        return self.state / "containerd.log"

    @classmethod
    def under(cls, base: StrPath) -> DaemonPaths:
        """Root and state side by side under one directory (tests, throwaway daemons)."""
        return cls(root=Path(base, "root"), state=Path(base, "state"))


def default_paths() -> DaemonPaths:
    """The embedded daemon's directories: ``$CTREXEC_EMBEDDED_DIR``'s, else the host's."""
    base = os.environ.get(EMBEDDED_DIR_ENV)
    if base:
        return DaemonPaths.under(Path(base))
    return DaemonPaths(root=DEFAULT_ROOT_DIR, state=DEFAULT_STATE_DIR)
