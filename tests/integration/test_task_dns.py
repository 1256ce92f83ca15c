"""A task's own resolver config (``dns``, ``dns_search``, ``dns_options``: docker's
--dns flags, Nomad's ``network { dns { } }``) in its own /etc/resolv.conf."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from _support import scratch_executor

from ctrexec.containerd.client import Client
from ctrexec.errors import InvalidField
from ctrexec.net import hostfiles, netns
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor


@pytest.fixture
def ex(client: Client, tmp_path: Path, test_image: str) -> Iterator[Executor]:
    with scratch_executor(client, tmp_path, "dns-") as executor:
        yield executor


@pytest.fixture
def ns() -> Iterator[str]:
    name = f"cxt-dns{secrets.token_hex(3)}"
    netns.create(name)
    try:
        yield name
    finally:
        netns.remove(name)


def test_the_tasks_resolv_conf_is_its_own(ex: Executor, test_image: str, ns: str) -> None:
    config = TaskConfig(
        name="dns-own", image=test_image, command=("sleep", "600"), netns=ns,
        dns=("10.0.0.53", "fd00::53"), dns_search=("svc.test", "test"),
        dns_options=("ndots:2",),
    )  # fmt: skip
    ex.start_task(config)
    shown = ex.exec("dns-own", ["cat", "/etc/resolv.conf"])
    assert shown.stdout == (
        b"nameserver 10.0.0.53\nnameserver fd00::53\nsearch svc.test test\noptions ndots:2\n"
    )
    # Each task has its own: a second one in the namespace has the host's resolver.
    ex.start_task(
        TaskConfig(name="dns-other", image=test_image, command=("sleep", "600"), netns=ns)
    )
    host = hostfiles.render_resolv_conf(hostfiles.read_host_file(hostfiles.HOST_RESOLV))
    assert ex.exec("dns-other", ["cat", "/etc/resolv.conf"]).stdout == host.encode()
    assert ex.exec("dns-own", ["cat", "/etc/resolv.conf"]).stdout == shown.stdout


def test_a_name_is_not_a_nameserver(test_image: str) -> None:
    with pytest.raises(InvalidField, match=r"nameserver 'dns\.test' is not an IP address"):
        TaskConfig(name="dns-bad", image=test_image, dns=("dns.test",))
