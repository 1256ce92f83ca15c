"""Errors in the user's words: an image no registry can be reached for, a mistyped
verb, connection flags before the verb, a --cpus the host cannot give.

No traffic leaves the machine: the refused registry is a loopback port nobody listens
on, and the lookups that must fail run inside an empty network namespace this test
makes (only ``lo``), where the resolver's query cannot even be sent.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from _cli import CLI_PROG, TEST_NAMESPACE, Cli
from _nethelpers import free_port

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]

RUN_TAG = f"cxt-err{os.getpid() % 10000}-{uuid.uuid4().hex[:4]}"


@pytest.fixture
def offline_ns() -> Iterator[str]:
    """An empty network namespace: a host without a network, for one CLI call."""
    name = f"{RUN_TAG}-off"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)


def _run_in(ns: str, cli: Cli, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", "exec", ns, *cli.argv("run", *args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _assert_two_lines(out: subprocess.CompletedProcess[str], ref: str) -> str:
    """docker's shape: the "Unable to find" line, then one error line; returns it."""
    assert out.returncode == 125, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 2, out.stderr
    assert lines[0] == f"Unable to find image '{ref}' locally"
    assert lines[1].startswith(f"ctrexec: cannot pull {ref}: registry "), lines[1]
    for noise in ("urllib3", "HTTPConnection", "Max retries", "Errno", "Traceback"):
        assert noise not in out.stderr
    return lines[1]


def test_run_refused_registry_names_image_and_registry(cli: Cli) -> None:
    port = free_port()
    ref = f"127.0.0.1:{port}/ctrexec-test/nothing:latest"
    out = cli("run", "--rm", ref, "true")
    line = _assert_two_lines(out, ref)
    assert line.endswith(f"registry http://127.0.0.1:{port}: connection refused"), line


def test_run_unresolvable_registry(cli: Cli, offline_ns: str) -> None:
    ref = "registry.ctrexec.invalid/x:latest"
    line = _assert_two_lines(_run_in(offline_ns, cli, "--rm", ref, "true"), ref)
    assert "https://registry.ctrexec.invalid: cannot resolve its host name" in line, line


def test_run_missing_hub_image_offline(cli: Cli, offline_ns: str) -> None:
    """The reported case: a Docker Hub image, no network."""
    ref = "docker.io/library/busybox:ctrexec-no-such-tag"
    line = _assert_two_lines(_run_in(offline_ns, cli, "--rm", ref, "true"), ref)
    assert "registry https://registry-1.docker.io: cannot resolve its host name" in line, line


def test_cpus_above_the_host_s_count_is_refused(cli: Cli, test_image: str) -> None:
    count = os.cpu_count() or 1
    name = f"{RUN_TAG}-cpus"
    out = cli("run", "--rm", "--name", name, "--cpus", str(count + 1), test_image, "true")
    assert out.returncode == 125, (out.stdout, out.stderr)
    assert out.stderr.strip().splitlines() == [
        f"ctrexec: Range of CPUs is from 0.01 to {count}.00, "
        f"as there are only {count} CPUs available"
    ]
    assert cli("inspect", name).returncode == 1  # nothing was made
    ok = cli("run", "--rm", "--cpus", str(count), test_image, "true")
    assert ok.returncode == 0, ok.stderr


def test_network_prune_without_a_bridge_reports_nothing() -> None:
    bridge = f"cxtbr{uuid.uuid4().hex[:6]}"
    env = dict(os.environ, CTREXEC_BRIDGE=bridge)
    out = subprocess.run(
        [*CLI_PROG, "network", "prune"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert (out.stdout, out.stderr) == ("", "")


def test_connection_flags_before_the_verb(cli: Cli, test_image: str) -> None:
    """``ctrexec --address A --namespace N ps``, as ``docker -H A ps``."""
    name = f"{RUN_TAG}-gf"
    made = cli("create", "--name", name, test_image, "true")
    assert made.returncode == 0, made.stderr
    try:
        argv = [*CLI_PROG, "--address", cli.address, "--namespace", TEST_NAMESPACE, "ps", "-a"]
        before = subprocess.run(
            [*argv, "--format", "{{.Names}}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert before.returncode == 0, before.stderr
        assert name in before.stdout.split()
    finally:
        assert cli("rm", name).returncode == 0
