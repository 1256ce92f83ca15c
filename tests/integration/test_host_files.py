"""Every task's own /etc/hosts, /etc/hostname and /etc/resolv.conf, as docker gives
them: with no network, on the host's, in a namespace shared with other tasks, and in a
group. Through the real CLI (its files under /run/ctrexec) and the library."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import TEST_NAMESPACE, Cli
from _support import scratch_executor, until

from ctrexec import labels as lbl
from ctrexec.containerd.client import Client
from ctrexec.net import hostfiles, netns
from ctrexec.net.hostfiles import HostsEntries, Member
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor

pytestmark = pytest.mark.integration

TAG = f"hf{secrets.token_hex(3)}"
SHOW = "cat /etc/hosts; echo ---; cat /etc/hostname; echo ---; cat /etc/resolv.conf"


def _show(text: str | bytes) -> tuple[str, str, str]:
    """The three files as SHOW printed them."""
    if isinstance(text, bytes):
        text = text.decode()
    hosts, hostname, resolv = text.split("---\n")
    return hosts, hostname, resolv


def _cli_files(name: str) -> Path:
    """Where the CLI (the default files dir) keeps a task's files."""
    return hostfiles.task_dir(hostfiles.DEFAULT_DIR, TEST_NAMESPACE, name).directory


def _host_resolv(*, keep_loopback: bool = False) -> str:
    text = hostfiles.read_host_file(hostfiles.HOST_RESOLV)
    return hostfiles.render_resolv_conf(text, keep_loopback=keep_loopback)


@pytest.fixture
def made(cli: Cli) -> Iterator[list[str]]:
    """Containers a test made through the CLI; removed (forced) afterwards, and none of
    their files may be left."""
    names: list[str] = []
    yield names
    if names:
        with contextlib.suppress(Exception):
            cli("rm", "-f", *names)
    assert [n for n in names if _cli_files(n).exists()] == []


@pytest.fixture
def ns() -> Iterator[str]:
    name = f"cxt-{TAG}-{secrets.token_hex(2)}"
    netns.create(name)
    try:
        yield name
    finally:
        netns.remove(name)


def test_a_task_without_a_network_gets_all_three(
    cli: Cli, test_image: str, made: list[str]
) -> None:
    name = f"{TAG}-none"
    made.append(name)
    out = cli(
        "run", "--name", name, "--netns", "none", "--hostname", "solo",
        "--add-host", "db:10.0.0.7", "--add-host", "v6:fd00::7",
        test_image, "sh", "-c", SHOW,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    hosts, hostname, resolv = _show(out.stdout)
    extra = (("db", "10.0.0.7"), ("v6", "fd00::7"))
    assert hosts == hostfiles.render_hosts(HostsEntries(hostname="solo", extra_hosts=extra))
    assert hostname == "solo\n"
    assert resolv == _host_resolv()
    assert _cli_files(name).is_dir()
    assert cli("rm", name).returncode == 0
    assert not _cli_files(name).exists()


def test_a_bad_extra_host_is_refused_before_anything_exists(cli: Cli, test_image: str) -> None:
    name = f"{TAG}-badhost"
    out = cli("run", "--name", name, "--add-host", "db:host-gateway", test_image, "true")
    assert out.returncode == 125
    assert "host-gateway is not supported" in out.stderr and "Traceback" not in out.stderr
    assert out.stderr.startswith("ctrexec: invalid --add-host"), out.stderr
    assert cli("inspect", name).returncode != 0
    assert not _cli_files(name).exists()


def test_on_the_hosts_network_the_files_are_the_hosts(
    cli: Cli, test_image: str, made: list[str]
) -> None:
    name = f"{TAG}-host"
    made.append(name)
    out = cli("run", "--rm", "--name", name, "--netns", "host", test_image, "sh", "-c", SHOW)
    assert out.returncode == 0, out.stderr
    hosts, hostname, resolv = _show(out.stdout)
    host_hosts = hostfiles.read_host_file(hostfiles.HOST_HOSTS)
    assert hosts.startswith(host_hosts.rstrip("\n") + "\n")
    assert hosts == hostfiles.render_hosts(HostsEntries(hostname=name, base=host_hosts))
    assert hostname == f"{name}\n"  # its UTS namespace stays its own, as before
    assert resolv == _host_resolv(keep_loopback=True)
    until(lambda: not _cli_files(name).exists(), "--rm to remove the task's files")


def test_tasks_sharing_a_namespace_each_see_their_own(
    cli: Cli, test_image: str, made: list[str], ns: str
) -> None:
    for who in ("a", "b"):
        made.append(f"{TAG}-sh{who}")
        out = cli(
            "run", "-d", "--name", f"{TAG}-sh{who}", "--netns", ns, "--hostname", f"host-{who}",
            test_image, "sleep", "600",
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
    for who in ("a", "b"):
        out = cli("exec", f"{TAG}-sh{who}", "sh", "-c", SHOW)
        assert out.returncode == 0, out.stderr
        hosts, hostname, _ = _show(out.stdout)
        assert hostname == f"host-{who}\n"
        assert hosts == hostfiles.render_hosts(HostsEntries(hostname=f"host-{who}"))


def test_dns_flags_give_each_task_its_resolver(
    cli: Cli, test_image: str, made: list[str], ns: str
) -> None:
    made += [f"{TAG}-dnsa", f"{TAG}-dnsb"]
    a = cli(
        "run", "--rm", "--name", f"{TAG}-dnsa", "--netns", ns, "--dns", "192.0.2.53",
        "--dns", "2001:db8::53", "--dns-search", "example.test", "--dns-option", "ndots:2",
        test_image, "cat", "/etc/resolv.conf",
    )  # fmt: skip
    assert a.returncode == 0, a.stderr
    assert a.stdout == (
        "nameserver 192.0.2.53\nnameserver 2001:db8::53\nsearch example.test\noptions ndots:2\n"
    )
    b = cli("run", "--rm", "--name", f"{TAG}-dnsb", "--netns", ns, test_image, "cat",
            "/etc/resolv.conf")  # fmt: skip
    assert (b.returncode, b.stdout) == (0, _host_resolv()), b.stderr
    bad = cli("run", "--rm", "--name", f"{TAG}-dnsc", "--dns", "resolver1", test_image, "true")
    assert bad.returncode == 125 and "resolver1" in bad.stderr, bad.stderr
    assert len(bad.stderr.splitlines()) == 1


@pytest.fixture
def ex(client: Client, tmp_path: Path, test_image: str) -> Iterator[Executor]:
    with scratch_executor(client, tmp_path, f"{TAG}-") as executor:
        yield executor
    files = tmp_path / "files"
    assert not files.exists() or list(files.iterdir()) == [], "task files left"


def test_each_tasks_resolver_and_name_in_one_namespace(
    ex: Executor, test_image: str, ns: str
) -> None:
    """The library path: each task's --dns and --hostname, whoever came first; and a
    start after the files went (a reboot empties /run) writes them again."""
    first = TaskConfig(
        name=f"{TAG}-d1", image=test_image, command=("sleep", "600"), netns=ns,
        hostname="one", dns=("10.0.0.53",), dns_search=("one.test",),
    )  # fmt: skip
    second = TaskConfig(
        name=f"{TAG}-d2", image=test_image, command=("sleep", "600"), netns=ns,
        hostname="two", dns=("10.0.0.54",),
    )  # fmt: skip
    for cfg in (first, second):
        ex.start_task(cfg)
    seen = {n: _show(ex.exec(n, ["sh", "-c", SHOW]).stdout) for n in (first.name, second.name)}
    assert seen[first.name][1:] == ("one\n", "nameserver 10.0.0.53\nsearch one.test\n")
    assert seen[second.name][1:] == ("two\n", "nameserver 10.0.0.54\n")
    assert seen[second.name][0] == hostfiles.render_hosts(HostsEntries(hostname="two"))

    directory = Path(ex.inspect(first.name).labels[lbl.HOSTFILES_DIR])
    ex.stop(first.name, timeout=0)
    for p in directory.iterdir():
        p.unlink()
    ex.start(first.name)
    again = _show(ex.exec(first.name, ["sh", "-c", SHOW]).stdout)
    assert again == seen[first.name]
    for cfg in (first, second):
        ex.destroy(cfg.name, force=True)
    assert not directory.exists()


def test_a_groups_members_are_in_each_hosts_file(cli: Cli, test_image: str, tmp_path: Path) -> None:
    group = f"{TAG}g"
    spec = tmp_path / "group.toml"
    spec.write_text(
        f'name = "{group}"\nnetwork = "none"\n\n'
        f'[[task]]\nname = "app"\nimage = "{test_image}"\nhostname = "front"\n'
        'command = ["sleep", "600"]\n\n'
        f'[[task]]\nname = "db"\nimage = "{test_image}"\ncommand = ["sleep", "600"]\n'
    )
    members = (Member(f"{group}-app", "app", "front"), Member(f"{group}-db", "db", group))
    try:
        out = cli("group up", str(spec))
        assert out.returncode == 0, out.stderr
        for task, hostname in (("app", "front"), ("db", group)):
            out = cli("exec", f"{group}-{task}", "sh", "-c", SHOW)
            assert out.returncode == 0, out.stderr
            hosts, shown_name, _ = _show(out.stdout)
            assert shown_name == f"{hostname}\n"
            assert hosts == hostfiles.render_hosts(HostsEntries(hostname=hostname, members=members))
            # Members of one namespace reach each other by name over its loopback.
            ping = cli("exec", f"{group}-{task}", "ping", "-c", "1", "-W", "5", "db")
            assert ping.returncode == 0, ping.stdout + ping.stderr
        assert all(_cli_files(m.id).is_dir() for m in members)
    finally:
        down = cli("group down", group)
    assert down.returncode == 0, down.stderr
    assert [m.id for m in members if _cli_files(m.id).exists()] == []
