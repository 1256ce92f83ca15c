"""Commands run in a task beside its own process (``docker exec``): streamed, run to
their end, or left running. The process spec (user, environment, working directory)
is the task's, made by :mod:`ctrexec.tasks.execspec`; :class:`~ctrexec.Executor`
inherits these verbs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Unpack

from ctrexec.containerd import execs
from ctrexec.containerd.client import Client
from ctrexec.containerd.execs import ExecResult, run_exec, start_exec
from ctrexec.containerd.streams import Process, StreamOptions
from ctrexec.tasks import stdio as taskio
from ctrexec.tasks.execspec import ExecOptions, process_spec
from ctrexec.tasks.users import ImageUsers


class ExecStreamOptions(ExecOptions, StreamOptions, total=False):
    """An exec's options and where its streamed output goes."""


class Execs:
    """The exec verbs; they need only the client and the image users' cache."""

    client: Client
    users: ImageUsers

    def exec_stream(
        self,
        task_id: str,
        args: Sequence[str],
        *,
        tty: bool = False,
        stdin: bool = False,
        size: tuple[int, int] | None = None,
        **options: Unpack[ExecStreamOptions],
    ) -> Process:
        """Run a command in the task and stream its stdio (see :class:`ctrexec.Process`);
        ``tty`` gives it a pseudo-terminal of ``size`` (columns, rows)."""
        spec = process_spec(self.client, self.users, task_id, args, options, tty=tty)
        out, err = options.get("on_stdout"), options.get("on_stderr")
        with taskio.command_errors():
            return start_exec(
                self.client, task_id, spec, stdin=stdin, size=size, on_stdout=out, on_stderr=err
            )

    def exec(
        self,
        task_id: str,
        args: Sequence[str],
        *,
        timeout: float | None = None,
        **options: Unpack[ExecOptions],
    ) -> ExecResult:
        """Run a command in the task and return its exit code and output."""
        spec = process_spec(self.client, self.users, task_id, args, options)
        with taskio.command_errors():
            return run_exec(self.client, task_id, spec, timeout=timeout)

    def exec_detached(
        self, task_id: str, args: Sequence[str], **options: Unpack[ExecOptions]
    ) -> execs.DetachedExec:
        """Start a command in the task and return once it runs, leaving it running with
        its output discarded (docker's ``exec -d``); the task is its keeper (see
        :func:`ctrexec.containerd.execs.start_detached`)."""
        spec = process_spec(self.client, self.users, task_id, args, options)
        with taskio.command_errors():
            return execs.start_detached(self.client, task_id, spec)
