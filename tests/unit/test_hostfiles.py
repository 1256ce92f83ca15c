"""Each task's /etc/hosts, /etc/resolv.conf and /etc/hostname: rendering, the labels
they are rendered from, and how they are written (no root, no daemon)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ctrexec import labels as lbl
from ctrexec.errors import InvalidArgument, InvalidField
from ctrexec.net import hostfiles
from ctrexec.net.hostfiles import HostsEntries, Member
from ctrexec.tasks import files as taskfiles
from ctrexec.tasks.config import TaskConfig

LOCALHOST = (
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "fe00::0\tip6-localnet\n"
    "ff00::0\tip6-mcastprefix\n"
    "ff02::1\tip6-allnodes\n"
    "ff02::2\tip6-allrouters\n"
)


def test_a_task_without_an_address_names_itself_on_127_0_1_1() -> None:
    assert hostfiles.render_hosts(HostsEntries(hostname="web")) == LOCALHOST + "127.0.1.1\tweb\n"


def test_a_task_names_itself_on_each_of_its_addresses() -> None:
    text = hostfiles.render_hosts(HostsEntries(hostname="web", addresses=("10.1.0.5", "fd00::5")))
    assert text == LOCALHOST + "10.1.0.5\tweb\nfd00::5\tweb\n"


def test_extra_hosts_come_before_the_tasks_own_name_so_they_win() -> None:
    entries = HostsEntries(hostname="web", extra_hosts=(("web", "10.9.9.9"), ("db", "fd00::7")))
    text = hostfiles.render_hosts(entries)
    assert text == LOCALHOST + "10.9.9.9\tweb\nfd00::7\tdb\n127.0.1.1\tweb\n"


def test_group_members_are_named_on_the_namespaces_addresses() -> None:
    members = (Member("g-app", "app", "front"), Member("g-db", "db", "g"))
    text = hostfiles.render_hosts(
        HostsEntries(hostname="front", addresses=("10.1.0.5",), members=members)
    )
    # Each name once: the task's own hostname is not listed again, nor a shared one.
    assert text == LOCALHOST + "10.1.0.5\tfront\n10.1.0.5\tg-app app\n10.1.0.5\tg-db db g\n"


def test_members_of_a_namespace_without_an_address_meet_on_loopback() -> None:
    members = (Member("g-app", "app", "g"), Member("g-db", "db", "g"))
    text = hostfiles.render_hosts(HostsEntries(hostname="g", members=members))
    assert text == LOCALHOST + "127.0.1.1\tg\n127.0.0.1\tg-app app\n127.0.0.1\tg-db db\n"


def test_on_the_hosts_network_the_hosts_own_file_is_the_base() -> None:
    base = "127.0.0.1 localhost\n127.0.0.1 box # the host\n"
    assert hostfiles.render_hosts(HostsEntries(hostname="box", base=base)) == base
    text = hostfiles.render_hosts(
        HostsEntries(hostname="web", base=base, extra_hosts=(("db", "10.0.0.7"),))
    )
    assert text == base + "10.0.0.7\tdb\n127.0.1.1\tweb\n"


def test_members_round_trip_through_their_label() -> None:
    members = (Member("g-app", "app", "front"), Member("g-db", "db", "g.example"))
    text = hostfiles.format_members(members)
    assert text == "g-app:app:front,g-db:db:g.example"
    assert hostfiles.parse_members(text) == members
    assert hostfiles.parse_members("") == ()
    assert hostfiles.parse_members("bad,a:b:c,x::y") == (Member("a", "b", "c"),)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("db:10.0.0.7", ("db", "10.0.0.7")),
        ("db=10.0.0.7", ("db", "10.0.0.7")),
        ("db:fd00::7", ("db", "fd00::7")),
        ("db:[fd00::7]", ("db", "fd00::7")),
        ("db.example:10.0.0.7", ("db.example", "10.0.0.7")),
    ],
)
def test_extra_host_forms(text: str, want: tuple[str, str]) -> None:
    assert hostfiles.parse_extra_host(text) == want


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("db", "is not NAME:IP"),
        (":10.0.0.7", "is not NAME:IP"),
        ("d b:10.0.0.7", "is not NAME:IP"),
        ("db:example.com", "is not an IP address"),
        ("db:host-gateway", "host-gateway is not supported"),
    ],
)
def test_bad_extra_hosts_are_refused(text: str, says: str) -> None:
    with pytest.raises(InvalidArgument, match=says):
        hostfiles.parse_extra_host(text)


def test_a_taskconfig_refuses_a_bad_extra_host_by_field() -> None:
    with pytest.raises(InvalidField) as err:
        TaskConfig(name="t", image="busybox", extra_hosts=("db:nowhere",))
    assert err.value.field == "extra_hosts"
    cfg = TaskConfig(name="t", image="busybox", extra_hosts=["db:10.0.0.7"])
    assert TaskConfig.from_json(cfg.to_json()).extra_hosts == ("db:10.0.0.7",)


def test_resolv_conf_drops_loopback_servers_unless_on_the_hosts_network() -> None:
    host = "nameserver 127.0.0.53\nnameserver ::1\nnameserver 10.0.0.1\nsearch lan\n"
    assert hostfiles.render_resolv_conf(host) == "nameserver 10.0.0.1\nsearch lan\n"
    assert hostfiles.render_resolv_conf(host, keep_loopback=True) == host


def test_entries_come_from_the_records_labels_and_the_config() -> None:
    cfg = TaskConfig(
        name="g-app", image="busybox", group="g", hostname="front", extra_hosts=("x:10.0.0.9",)
    )
    labels = {
        lbl.NETNS_MODE: "path",
        lbl.ADDRESSES: "10.1.0.5,not-an-ip",
        lbl.GROUP_MEMBERS: "g-app:app:front,g-db:db:g",
    }
    entries = taskfiles.hosts_entries("g-app", labels, cfg)
    assert entries == HostsEntries(
        hostname="front",
        addresses=("10.1.0.5",),
        members=(Member("g-app", "app", "front"), Member("g-db", "db", "g")),
        extra_hosts=(("x", "10.0.0.9"),),
    )
    # Without a config (a record made outside ctrexec's TaskConfig), the id names it.
    assert taskfiles.hosts_entries("t1", {}, None) == HostsEntries(hostname="t1")


def test_host_network_files_are_the_hosts_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "hosts").write_text("127.0.0.1 localhost\n")
    (tmp_path / "resolv.conf").write_text("nameserver 127.0.0.53\n")
    monkeypatch.setattr(hostfiles, "HOST_HOSTS", tmp_path / "hosts")
    monkeypatch.setattr(hostfiles, "HOST_RESOLV", tmp_path / "resolv.conf")
    files = hostfiles.task_dir(tmp_path / "files", "ns", "web")
    labels = {lbl.NETNS_MODE: "host", lbl.HOSTFILES_DIR: str(files.directory)}
    cfg = TaskConfig(name="web", image="busybox", netns="host")
    taskfiles.write("web", labels, cfg, replace=True)
    assert files.hosts.read_text() == "127.0.0.1 localhost\n127.0.1.1\tweb\n"
    assert files.resolv_conf.read_text() == "nameserver 127.0.0.53\n"
    assert files.hostname.read_text() == "web\n"
    # In a namespace of its own, the host's loopback resolver is unreachable: dropped.
    taskfiles.write("web", {**labels, lbl.NETNS_MODE: "none"}, cfg, replace=True)
    assert files.resolv_conf.read_text() == "\n"
    dns = TaskConfig(name="web", image="busybox", dns=("10.0.0.53",), dns_search=("lan",))
    taskfiles.write("web", labels, dns, replace=True)
    assert files.resolv_conf.read_text() == "nameserver 10.0.0.53\nsearch lan\n"


def test_task_dirs_are_per_namespace_and_id() -> None:
    base = Path("/b")
    assert hostfiles.task_dir(base, "ns", "a.b").directory == Path("/b/ns+a.b")
    assert hostfiles.task_dir(base, "ns.a", "b") != hostfiles.task_dir(base, "ns", "a.b")


def test_start_rewrites_only_what_is_missing(tmp_path: Path) -> None:
    files = hostfiles.task_dir(tmp_path, "ns", "web")
    labels = {lbl.NETNS_MODE: "none", lbl.HOSTFILES_DIR: str(files.directory)}
    taskfiles.write("web", labels, None, replace=True)
    files.hosts.write_text("edited by the task\n")  # /etc/hosts is writable, as in docker
    inode = files.hosts.stat().st_ino
    files.hostname.unlink()  # as a reboot emptying /run would, for all three
    taskfiles.write("web", labels, None, replace=False)
    assert files.hostname.read_text() == "web\n"
    assert files.hosts.read_text() == "edited by the task\n"
    assert files.hosts.stat().st_ino == inode  # what a running task bind-mounted
    taskfiles.write("web", labels, None, replace=True)  # create: nothing of an old one kept
    assert files.hosts.read_text() == hostfiles.render_hosts(HostsEntries(hostname="web"))
    assert sorted(p.name for p in files.directory.iterdir()) == ["hostname", "hosts", "resolv.conf"]
    assert {p.stat().st_mode & 0o777 for p in files.directory.iterdir()} == {0o644}


def _write_all_at_once(files: hostfiles.HostFiles, count: int) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def writer(n: int) -> None:
        barrier.wait()
        try:
            hostfiles.ensure(
                files, hosts=f"h{n}\n", resolv_conf=f"r{n}\n", hostname=f"n{n}", replace=False
            )
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_concurrent_writers_of_missing_files_agree_on_one(tmp_path: Path) -> None:
    """Two processes starting one task (the CLI and the supervisor) may both find a
    file missing: one writer's file wins whole, and no temp file is left behind."""
    for round_ in range(20):  # a race needs a few tries to show
        files = hostfiles.task_dir(tmp_path, "ns", f"t{round_}")
        assert _write_all_at_once(files, 8) == []
        assert files.hosts.read_text() in {f"h{n}\n" for n in range(8)}
        assert sorted(p.name for p in files.directory.iterdir()) == [
            "hostname",
            "hosts",
            "resolv.conf",
        ]


def test_the_legacy_key_of_an_ip_netns_name_is_the_name(tmp_path: Path) -> None:
    assert hostfiles.legacy_key("/run/netns/web") == "name-web"
    pin = tmp_path / "web"
    pin.write_text("")
    st = pin.stat()
    assert hostfiles.legacy_key(str(pin)) == f"ino-{st.st_dev}-{st.st_ino}"


def test_a_resolv_conf_parses_into_its_parts() -> None:
    text = (
        "# made by hand\nnameserver 127.0.0.53\nnameserver 192.0.2.1 # main\n"
        "domain old.test\nsearch a.test b.test\noptions ndots:2\noptions rotate\n"
    )
    got = hostfiles.parse_resolv_conf(text)
    assert got == hostfiles.Resolver(
        servers=("192.0.2.1",), searches=("a.test", "b.test"), options=("ndots:2", "rotate")
    )
    assert hostfiles.parse_resolv_conf(text, keep_loopback=True).servers[0] == "127.0.0.53"
