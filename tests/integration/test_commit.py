"""``commit`` through the real CLI: a container's changes become an image that runs.

Everything is made in the session's namespace under names of the test's own and removed
at its end (the session audit then checks that no lease or view snapshot was left).
"""

from __future__ import annotations

import json
import secrets

from _cli import Cli

from ctrexec.containerd import content
from ctrexec.containerd.client import Client
from ctrexec.images import lookup


def test_commit_keeps_the_file_and_the_changes(cli: Cli, client: Client, test_image: str) -> None:
    name = f"cx-commit-{secrets.token_hex(4)}"
    ref = f"cx-committed-{secrets.token_hex(4)}:v1"
    try:
        made = cli("run", "--name", name, test_image, "sh", "-c", "echo committed > /data.txt")
        assert made.returncode == 0, made.stderr
        out = cli(
            "commit",
            "-c",
            'CMD ["cat", "/data.txt"]',
            "--change",
            "ENV CX_COMMITTED=yes",
            "-m",
            "a file",
            "-a",
            "tester",
            name[:-1],
            ref,
        )  # name[:-1]: a unique prefix of the name, as docker takes IDs
        assert out.returncode == 0, out.stderr
        image = lookup.get_image(client, ref)
        assert out.stdout == f"{image.config_digest}\n"
        base = lookup.get_image(client, test_image)
        assert image.layers[:-1] == base.layers  # one layer more, on the image's own
        config = json.loads(content.read_blob(client, image.config_descriptor))
        assert config["author"] == "tester"
        assert config["history"][-1]["comment"] == "a file"
        assert config["config"]["Cmd"] == ["cat", "/data.txt"]

        ran = cli("run", "--rm", ref)
        assert (ran.returncode, ran.stdout) == (0, "committed\n"), ran.stderr
        env = cli("run", "--rm", ref, "sh", "-c", "echo $CX_COMMITTED")
        assert (env.returncode, env.stdout) == (0, "yes\n"), env.stderr
    finally:
        cli("rm", "-f", name)
        cli("rmi", ref)


def test_commit_refusals_are_one_line(cli: Cli, test_image: str) -> None:
    missing = cli("commit", "cx-no-such-container", "cx-x:v1")
    assert missing.returncode == 1
    assert len(missing.stderr.splitlines()) == 1, missing.stderr
    other = cli("commit", "-c", "EXPOSE 80", "cx-no-such-container", "cx-x:v1")
    assert other.returncode == 125
    assert other.stderr.startswith("ctrexec: --change 'EXPOSE 80': use one of CMD"), other.stderr
