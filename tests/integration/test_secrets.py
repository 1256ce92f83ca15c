"""No registry password outside docker's config.json, and that file is root's alone.

One login against the test registry's htpasswd (tests/integration/_registry.py), then
everything an operator or another tool reads: the CLI's output and errors (a wrong
password, a missing tag, stale credentials), ``pull --json``'s events, ``ctrexec
events`` over a task of the image, ``inspect`` of
the image and of a container made from it, the container's log, the log daemon's and
containerd's own logs. The password, and the base64 ``user:password`` docker keeps in
config.json, appear in none of them. docs/security.md, "Secrets".
"""

from __future__ import annotations

import base64
import json
import secrets
import signal
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import CLI_PROG, Cli
from _registry import PASSWORD, USER, Registry, push
from _support import scratch_executor

# The events tests' runner of ``ctrexec events``, reused rather than copied.
from test_events_cli import EventsProcess

from ctrexec.containerd.client import Client
from ctrexec.logs import client as logclient
from ctrexec.tasks.config import TaskConfig

WRONG = f"sac-wrong-{secrets.token_hex(4)}"
SECRETS = (PASSWORD, WRONG, base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode())


def clean(what: str, text: str) -> None:
    found = [s for s in SECRETS if s in text]
    assert not found, f"{what} shows a secret: {text[:2000]}"


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory, test_image_archive: Path) -> Iterator[str]:
    """A registry behind basic auth holding the test image: its private reference."""
    reg = Registry(tmp_path_factory.mktemp("sac-registry"), auth=True)
    reg.start()
    try:
        ref = f"{reg.host}/private/sac-secret:v1"
        push(test_image_archive, ref, creds=True)
        yield ref
    finally:
        reg.stop()


def _login(host: str, password: str) -> tuple[int, str]:
    """``login`` talks to the registry alone: no containerd flags."""
    done = subprocess.run(
        [*CLI_PROG, "login", "-u", USER, "--password-stdin", host],
        input=password + "\n", capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def _clean_events(cli: Cli, client: Client, tmp_path: Path, image: str) -> None:
    """``ctrexec events`` over a task of the private image, from its start to its end."""
    events = EventsProcess(cli)
    with scratch_executor(client, tmp_path, "sac-secret-ev-") as ex:
        name = f"sac-secret-ev-{secrets.token_hex(3)}"
        ex.start_task(TaskConfig(name=name, image=image, command=("sleep", "300")))
        events.live(ex, name)
        ex.destroy(name, force=True)
        events.next_matching({"type": "exit", "task": name})
    code, err = events.stop(signal.SIGTERM)
    assert code == 0, err
    clean("ctrexec events", json.dumps(events.seen) + err)


def test_no_password_outside_config_json(
    cli: Cli,
    client: Client,
    private: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    containerd_address: str,
) -> None:
    host = private.split("/", 1)[0]
    docker = tmp_path / "docker"
    monkeypatch.setenv("DOCKER_CONFIG", str(docker))
    config = docker / "config.json"

    code, out = _login(host, WRONG)
    assert code == 125, out
    clean("a refused login", out)
    assert not config.exists()

    docker.mkdir(mode=0o755)
    config.write_text("{}\n")
    config.chmod(0o644)  # a file made by hand, or by an older tool: made private
    code, out = _login(host, PASSWORD)
    assert code == 0, out
    clean("login", out)
    st = config.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o600)

    name = f"sac-secret-{secrets.token_hex(3)}"
    try:
        missing = cli("pull", f"{host}/private/sac-secret:no-such-tag")
        assert missing.returncode != 0
        clean("a failed pull", missing.stdout + missing.stderr)
        pulled = cli("pull", "--json", private)
        assert pulled.returncode == 0, pulled.stderr
        clean("pull's events", pulled.stdout + pulled.stderr)
        run = cli("run", "--name", name, private, "sh", "-c", "env; echo done")
        assert run.returncode == 0 and "done" in run.stdout, run.stderr
        clean("the task's output", run.stdout + run.stderr)
        _clean_events(cli, client, tmp_path, private)
        for verb, *what in (("inspect", name), ("logs", name), ("images",)):
            shown = cli(verb, *what)
            assert shown.returncode == 0, shown.stderr
            clean(verb, shown.stdout + shown.stderr)

        # stale credentials: the registry refuses them, and says so without them
        saved = json.loads(config.read_text())
        stale = base64.b64encode(f"{USER}:{WRONG}".encode()).decode()
        saved["auths"][host]["auth"] = stale
        config.write_text(json.dumps(saved))
        refused = cli("pull", f"{host}/private/sac-secret:v1-not-cached")
        assert refused.returncode != 0
        text = refused.stdout + refused.stderr
        assert "authentication required" in text, text
        clean("a pull with a wrong password", text)
        assert stale not in text
    finally:
        cli("rm", "-f", name)
        cli("rmi", private)
    daemon_logs = (
        Path(logclient.state_dir(), "logd.log"),
        Path(containerd_address).with_name("containerd.log"),
    )
    for log in daemon_logs:
        if log.exists():
            clean(str(log), log.read_text(errors="replace"))
