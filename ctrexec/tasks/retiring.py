"""The Executor's calls that go in the next release (issue 38: front-end helpers off
the scheduler's facade), kept in one room so that their removal is one deletion: each
still works and warns (:class:`~ctrexec.Executor` inherits them).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

from ctrexec.containerd import containers
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import ExitStatus
from ctrexec.tasks import info as taskinfo


class Retiring:
    """Deprecated Executor calls, each with what replaces it."""

    client: Client

    def lookup(self) -> containers.Lookup:
        """Deprecated: ``ContainerLookup(client)``, a front end's helper."""
        warnings.warn("Executor.lookup is deprecated", DeprecationWarning, stacklevel=2)
        return containers.Lookup(self.client)

    def with_oom(self, exits: Mapping[str, ExitStatus]) -> dict[str, ExitStatus]:
        """Deprecated: every exit ctrexec reports already says whether the OOM killer
        ended it."""
        warnings.warn("Executor.with_oom is deprecated", DeprecationWarning, stacklevel=2)
        return taskinfo.with_oom(self.client, exits)
