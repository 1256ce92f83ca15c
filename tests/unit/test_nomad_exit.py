"""The plugin's exit status is main's even when the agent that read its stdout and
stderr is gone: Python's own exit with unflushed output there is status 120 (seen with
a dead agent on Python 3.13), and go-plugin and the tests read the status."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

# Served and shut down: a line logged (hclog, as the plugin does) to the dead stderr
# stays in its buffer, for the exit's flush to fail on.
_SERVED = textwrap.dedent(
    """
    import logging
    from ctrexec.nomad import hclog, main as plugin

    def served():
        hclog.install()
        logging.getLogger("ctrexec.nomad").info("a line nobody reads")
        print("pending on stdout", end="")
        return 0

    plugin.main = served
    plugin.entry()
    """
)
# Started by hand (no cookie): refused with status 1.
_REFUSED = "from ctrexec.nomad import main as plugin; plugin.entry()"


def _closing(fds: str, program: str) -> list[str]:
    """Python started with ``fds`` (``>&-``, ``2>&-``) closed: those of sys.stdout and
    sys.stderr are None."""
    return ["sh", "-c", f'exec "$@" {fds}', "sh", sys.executable, "-c", program]


def _run(program: str, how: str) -> int:
    # Buffered stdio, as under Nomad's agent: unbuffered, nothing would be left to flush.
    drop = ("PYTHONUNBUFFERED", "NOMAD_PLUGIN_MAGIC_COOKIE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    if how == "closed":
        cmd = _closing(">&- 2>&-", program)
        return subprocess.run(cmd, env=env, check=False, timeout=60).returncode
    read_end, write_end = os.pipe()  # no reader: every write fails with EPIPE
    os.close(read_end)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", program], env=env, stdout=write_end, stderr=write_end
        )
    finally:
        os.close(write_end)
    return proc.wait(timeout=60)


@pytest.mark.parametrize("how", ["no reader", "closed"])
@pytest.mark.parametrize(
    ("program", "code"), [(_SERVED, 0), (_REFUSED, 1)], ids=["served", "refused"]
)
def test_exit_status_is_mains_with_the_agents_streams_gone(
    program: str, code: int, how: str
) -> None:
    assert _run(program, how) == code


def test_refused_by_hand_says_why_on_stderr_only() -> None:
    """The refusal goes to stderr; with stderr closed it is dropped, not printed on
    stdout (go-plugin's handshake channel)."""
    env = {k: v for k, v in os.environ.items() if k != "NOMAD_PLUGIN_MAGIC_COOKIE"}
    out = subprocess.run(
        _closing("2>&-", _REFUSED),
        env=env,
        stdout=subprocess.PIPE,
        check=False,
        timeout=60,
    )
    assert (out.returncode, out.stdout) == (1, b"")
