"""The ctrexec CLI as the tests run it: a real subprocess, as a script would call it.

One place builds the argv (``ctrexec COMMAND --address A --namespace N [--log-dir L]
ARGS``), so a test says only what differs: its command and flags. The ``cli``
fixture in tests/conftest.py binds it to the session's containerd.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

#: The containerd namespace of the session. Runs side by side (scripts/test runs one per
#: containerd version) give each a name of its own: cgroups, runc state and host files
#: are named after it and are the only things such runs share.
TEST_NAMESPACE = os.environ.get("CTREXEC_TEST_NAMESPACE", "ctrexec-test")
#: How the tests start the CLI; the chaos suite swaps in its kill-point wrapper.
CLI_PROG = (sys.executable, "-m", "ctrexec.cli.main")
#: The commands that take ``--log-dir``: those that create tasks.
LOG_DIR_COMMANDS = frozenset({"run", "create", "group up"})


def cli_argv(
    command: str,
    address: str,
    *args: str,
    namespace: str | None = TEST_NAMESPACE,
    log_dir: Path | None = None,
    prog: Sequence[str] = CLI_PROG,
) -> list[str]:
    """The argv of one CLI call; ``command`` may be two words (``"group up"``).

    ``namespace=None`` leaves the flag out, to test the CLI's own default.
    """
    argv = [*prog, *command.split(), "--address", address]
    if namespace is not None:
        argv += ["--namespace", namespace]
    if log_dir is not None and command in LOG_DIR_COMMANDS:
        argv += ["--log-dir", str(log_dir)]
    return [*argv, *args]


class Cli:
    """Runs the CLI against one containerd; each call answers a CompletedProcess."""

    def __init__(self, address: str, log_dir: Path | None = None) -> None:
        self.address = address
        self.log_dir = log_dir

    def argv(self, command: str, *args: str, namespace: str | None = TEST_NAMESPACE) -> list[str]:
        return cli_argv(command, self.address, *args, namespace=namespace, log_dir=self.log_dir)

    def __call__(
        self,
        command: str,
        *args: str,
        check: bool = False,
        timeout: float = 120,
        namespace: str | None = TEST_NAMESPACE,
    ) -> subprocess.CompletedProcess[str]:
        """``check=False`` by default: the exit code is most tests' assertion."""
        return subprocess.run(
            self.argv(command, *args, namespace=namespace),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
        )
