"""A published port from the library alone: ``start_task(config, network=NetworkRequest(...))``.

What ``ctrexec run -p`` gets, a scheduler gets through ``ctrexec``'s public names: a
namespace of the task's own on the bridge, its ports published (``-P``: the image's
exposed ones), and, when the create or start fails after the namespace was wired, no
namespace, address, NAT rule or host file left behind. The bridge has the test's own
name, subnet and directories (``cli_bridge``, which audits them again at the end);
traffic goes only to loopback.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from _nethelpers import cli_bridge, free_port, iptables_dump
from _support import build_exposing_image, scratch_executor, until

from ctrexec import (
    Client,
    CommandNotFound,
    Executor,
    NetworkRequest,
    Networks,
    NotFound,
    TaskConfig,
    import_archive,
    remove_image,
)

pytestmark = pytest.mark.integration

SUBNET = "10.231.185.0/24"
HTTPD = ("httpd", "-f", "-p", "8080", "-h", "/var/www")


@pytest.fixture
def nets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Networks]:
    """The test's bridge as a scheduler would name it: its own Networks value (the same
    settings ``cli_bridge`` puts in the environment, whose audit runs at the end)."""
    with cli_bridge(monkeypatch, tmp_path, SUBNET) as name:
        yield Networks(
            network=name,
            bridge=name,
            subnet=SUBNET,
            cache_dir=tmp_path / "cni-cache",
            ipam_dir=tmp_path / "ipam",
        )


@pytest.fixture
def ex(client: Client, nets: Networks, tmp_path: Path) -> Iterator[Executor]:
    """Removes the ``lpub-*`` containers before the bridge's audit (``nets``)."""
    with scratch_executor(client, tmp_path, "lpub-") as executor:
        yield executor


def _answered(body: list[bytes], port: int) -> bool:
    """One GET into ``body``; False while nothing answers yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
            body.append(resp.read())
    except OSError:  # URLError, refused, reset
        return False
    return True


def test_a_published_port_serves_on_loopback_and_destroy_releases_it(
    ex: Executor, nets: Networks, test_image: str
) -> None:
    port = free_port()
    config = TaskConfig(name="lpub-web", image=test_image, command=HTTPD)
    handle = ex.start_task(config, network=NetworkRequest(ports=[f"{port}:8080"], networks=nets))
    body: list[bytes] = []
    until(lambda: _answered(body, port), "the published port to answer")
    assert b"hello from ctrexec" in body[0]
    info = ex.inspect("lpub-web")
    assert [(p.host_port, p.container_port) for p in info.ports] == [(port, 8080)]
    assert info.addresses and info.addresses[0].cidr.startswith("10.231.185."), info.addresses
    assert handle.netns_path is not None and Path(handle.netns_path).exists()
    ex.destroy("lpub-web", force=True)
    assert not Path(handle.netns_path).exists()


@pytest.fixture
def exposing_image(client: Client, tmp_path: Path) -> Iterator[str]:
    """The test image under another name, with ExposedPorts 8080/tcp and 9000/udp."""
    name = "docker.io/library/ctrexec-test-lpub-expose:latest"
    archive = tmp_path / "expose.tar"
    build_exposing_image(archive, name)
    import_archive(client, archive)
    try:
        yield name
    finally:
        remove_image(client, name)


def test_publish_all_publishes_what_the_image_exposes(
    exposing_image: str, ex: Executor, nets: Networks
) -> None:
    given = free_port()
    config = TaskConfig(name="lpub-all", image=exposing_image, command=HTTPD)
    request = NetworkRequest(ports=(f"{given}:9000/udp",), networks=nets, publish_all=True)
    ex.start_task(config, network=request)
    ports = {(p.container_port, p.protocol): p.host_port for p in ex.inspect("lpub-all").ports}
    assert set(ports) == {(8080, "tcp"), (9000, "udp")}, ports
    assert ports[9000, "udp"] == given  # the given port wins over -P's pick
    body: list[bytes] = []
    until(lambda: _answered(body, ports[8080, "tcp"]), "the picked port of 8080 to answer")
    assert b"hello from ctrexec" in body[0]


def _nothing_left(name: str, tmp_path: Path, ex: Executor) -> None:
    """No record, namespace, address, CNI result, NAT rule or host file of ``name``."""
    with pytest.raises(NotFound):
        ex.inspect(name)
    assert not Path(f"/run/netns/cx-{name}").exists()
    assert list((tmp_path / "ipam").rglob("10.*")) == [], "an address stayed allocated"
    assert list((tmp_path / "cni-cache").rglob("*-eth0")) == [], "a CNI result stayed"
    assert "10.231.185." not in iptables_dump(), "a port mapping or masquerade rule stayed"
    assert [p for p in (tmp_path / "files").rglob("*") if name in str(p)] == []


def test_a_start_that_fails_after_the_wiring_leaves_nothing(
    ex: Executor, nets: Networks, test_image: str, tmp_path: Path
) -> None:
    """The command is not there (docker's 127): the namespace was wired and the record
    made before the start failed; all of it goes again."""
    config = TaskConfig(name="lpub-bad", image=test_image, command=("/no/such/command",))
    request = NetworkRequest(ports=[f"{free_port()}:8080"], networks=nets)
    with pytest.raises(CommandNotFound):
        ex.start_task(config, network=request)
    _nothing_left("lpub-bad", tmp_path, ex)


def test_a_create_that_fails_after_the_wiring_leaves_nothing(
    ex: Executor, nets: Networks, tmp_path: Path
) -> None:
    """No such image: the namespace is wired before the create finds that out (no
    record is made, so no destroy can release it: the request's rollback must)."""
    config = TaskConfig(name="lpub-noimg", image="docker.io/library/ctrexec-no-such:latest")
    request = NetworkRequest(ports=[f"{free_port()}:8080"], networks=nets)
    for call in (ex.create, ex.start_task):
        with pytest.raises(NotFound):
            call(config, network=request)
        _nothing_left("lpub-noimg", tmp_path, ex)
