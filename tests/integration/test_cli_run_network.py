"""``run -p``/``--network`` and ``run --restart``, through the real binary.

``run -d -p HOST:CONTAINER IMAGE`` needs no group file: the container gets a namespace
of its own on the bridge (an implicit group of one), and ``rm`` takes it all away again:
task, namespace, address, port mapping. The test bridge has its own name, subnet and
CNI directories, passed to the CLI through its ``CTREXEC_*`` settings.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import TEST_NAMESPACE, Cli
from _nethelpers import cli_bridge, free_port
from _support import build_exposing_image, gone, scratch_executor, until

from ctrexec import labels as lbl
from ctrexec.containerd.client import Client
from ctrexec.groups.presence import is_supervised
from ctrexec.net import cni, netns, settings
from ctrexec.tasks.executor import Executor
from ctrexec.testing import import_image

pytestmark = pytest.mark.integration

SUBNET = "10.231.188.0/24"
HTTPD = ["httpd", "-f", "-p", "8080", "-h", "/var/www"]


@pytest.fixture
def bridge(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    with cli_bridge(monkeypatch, tmp_path, SUBNET) as name:
        yield name


@pytest.fixture
def ex(client: Client, tmp_path: Path) -> Iterator[Executor]:
    with scratch_executor(client, tmp_path, "pub-") as executor:
        yield executor


def _get(port: int) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
        body: bytes = resp.read()
        return body


def _answered(body: list[bytes], port: int) -> bool:
    """One GET into ``body``; False while nothing answers yet (the server in the container
    starts after ``run`` returns, and a published port's rules may land a moment later)."""
    try:
        body.append(_get(port))
    except OSError:  # URLError, refused, reset
        return False
    return True


def test_run_publish_serves_on_localhost_and_rm_removes_the_network(
    cli: Cli, bridge: str, test_image: str, client: Client, made: list[str]
) -> None:
    port = free_port()
    made.append("pub-web")
    out = cli("run", "-d", "-p", f"{port}:8080", "--name", "pub-web", test_image, *HTTPD)
    assert (out.returncode, out.stdout, out.stderr) == (0, "pub-web\n", ""), out.stderr
    body: list[bytes] = []
    until(lambda: _answered(body, port), "the published port to answer")
    assert b"hello from ctrexec" in body[0]
    info = json.loads(cli("inspect", "pub-web", check=True).stdout)[0]["Ctrexec"]
    assert len(info["ports"]) == 1 and str(port) in info["ports"][0], info
    assert info["addresses"][0]["address"].startswith("10.231.188."), info
    shown = cli(
        "inspect", "-f", "{{.NetworkSettings.IPAddress}}/{{.NetworkSettings.IPPrefixLen}} "
        "{{json .HostConfig.PortBindings}} {{json .NetworkSettings.Ports}}", "pub-web",
    )  # fmt: skip
    address, bindings, ports = shown.stdout.split()
    assert address == info["addresses"][0]["address"], shown.stdout  # docker's IPAddress
    assert json.loads(bindings) == {"8080/tcp": [{"HostIp": "", "HostPort": str(port)}]}
    assert json.loads(ports) == {"8080/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(port)}]}
    ps = cli("ps", "--format", "{{.Names}} {{.Ports}}", check=True).stdout
    assert f"pub-web 0.0.0.0:{port}->8080/tcp" in ps, ps
    port_out = cli("port", "pub-web", check=True).stdout
    assert port_out == f"8080/tcp -> 0.0.0.0:{port}\n"
    path = netns.resolve("cx-pub-web")
    assert Path(path).exists()
    rm = cli("rm", "-f", "pub-web")
    assert (rm.returncode, rm.stdout) == (0, "pub-web\n"), rm.stderr
    assert not Path(path).exists()
    assert gone(client, "pub-web")


def test_publish_without_a_host_port_picks_one_and_keeps_it_across_a_restart(
    cli: Cli, bridge: str, test_image: str, made: list[str]
) -> None:
    made.append("pub-pick")
    out = cli("run", "-d", "-p", "127.0.0.1::8080", "--name", "pub-pick", test_image, *HTTPD)
    assert out.returncode == 0, out.stderr
    line = cli("port", "pub-pick", "8080", check=True).stdout
    host = line.strip()
    assert host.startswith("127.0.0.1:"), line
    port = int(host.rsplit(":", 1)[1])
    body: list[bytes] = []
    until(lambda: _answered(body, port), "the picked port to answer")
    assert cli("restart", "-t", "1", "pub-pick").returncode == 0
    assert cli("port", "pub-pick", "8080", check=True).stdout == line
    until(lambda: _answered(body, port), "the same port to answer after the restart")


def test_run_network_bridge_without_ports_and_run_rm_cleans_up(
    cli: Cli, bridge: str, test_image: str
) -> None:
    out = cli(
        "run", "--rm", "--network", "bridge", "--name", "pub-once", test_image,
        "sh", "-c", "ip -4 -o addr show eth0 | grep -o 'inet 10\\.231\\.188\\.[0-9]*'; "
        "grep pub-once /etc/hosts; cat /etc/hostname",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    inet, hosts_line, hostname = out.stdout.splitlines()
    address = inet.removeprefix("inet ")
    assert address.startswith("10.231.188."), out.stdout
    assert hosts_line.split() == [address, "pub-once"], out.stdout  # its own entry
    assert hostname == "pub-once"
    assert not Path(netns.resolve("cx-pub-once")).exists()


def test_run_network_none_and_host_need_no_namespace(cli: Cli, test_image: str) -> None:
    none = cli("run", "--rm", "--network", "none", test_image, "sh", "-c", "ls /sys/class/net")
    assert (none.returncode, none.stdout) == (0, "lo\n"), none.stderr
    host = cli("run", "--rm", "--network", "host", test_image, "ls", "/sys/class/net")
    assert host.returncode == 0 and "lo" in host.stdout.split(), host.stderr
    assert len(host.stdout.split()) == len(list(Path("/sys/class/net").iterdir()))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--network", "nosuch"], "invalid network mode 'nosuch'"),
        (["-p", "8000-8001:80"], "the host and container ranges differ in size"),
        (["-p", "1:2:3:4"], "invalid port mapping '1:2:3:4'"),
        (["--network", "none", "-p", "8080:80"], "--publish needs --network bridge or cni:NAME"),
        (["--netns", "host", "-p", "8080:80"], "--netns cannot be used with --network"),
        (["--network", "bridge", "--group", "g"], "--group cannot be used with --network"),
        (["--restart", "sometimes"], "invalid restart policy 'sometimes'"),
        (["--restart", "always:3"], "maximum retry count cannot be used"),
        (["--restart", "on-failure:x"], "invalid maximum retry count 'x'"),
        (["--restart", "always", "--rm"], "conflicting options: --restart and --rm"),
        (["--network", "cni:nosuchnet"], "no CNI network 'nosuchnet'"),
    ],
)
def test_bad_network_and_restart_flags_are_one_line_and_make_nothing(
    cli: Cli,
    bridge: str,
    test_image: str,
    client: Client,
    flags: list[str],
    message: str,
    made: list[str],
) -> None:
    made.append("pub-bad")  # removed, network and all, should the run succeed after all
    out = cli("run", "-d", "--name", "pub-bad", *flags, test_image, "true")
    assert out.returncode == 125, out
    assert len(out.stderr.splitlines()) == 1 and message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert gone(client, "pub-bad")
    assert not Path(netns.resolve("cx-pub-bad")).exists()


def test_a_taken_name_leaves_the_existing_container_and_its_network_alone(
    cli: Cli, bridge: str, test_image: str, made: list[str]
) -> None:
    port = free_port()
    made.append("pub-keep")
    first = cli("run", "-d", "-p", f"{port}:8080", "--name", "pub-keep", test_image, *HTTPD)
    assert first.returncode == 0, first.stderr
    again = cli("run", "-d", "-p", f"{free_port()}:8080", "--name", "pub-keep", test_image, "true")
    assert again.returncode == 125
    assert again.stderr == "ctrexec: container name 'pub-keep' is already in use\n"
    body: list[bytes] = []
    until(lambda: _answered(body, port), "the first container still to answer")
    assert Path(netns.resolve("cx-pub-keep")).exists()


def test_create_with_network_then_start_and_group_down_removes_it(
    cli: Cli, bridge: str, test_image: str, client: Client, made: list[str]
) -> None:
    port = free_port()
    made.append("pub-made")
    created = cli("create", "-p", f"{port}:8080", "--name", "pub-made", test_image, *HTTPD)
    assert (created.returncode, created.stdout) == (0, "pub-made\n"), created.stderr
    assert cli("start", "pub-made").returncode == 0
    body: list[bytes] = []
    until(lambda: _answered(body, port), "the created container to answer")
    down = cli("group down", "pub-made")
    assert down.returncode == 0, down.stderr
    assert gone(client, "pub-made")
    assert not Path(netns.resolve("cx-pub-made")).exists()


WARNING = "ctrexec: warning: restart policy on-failure: no `ctrexec supervise` runs"


def test_restart_without_supervisor_warns_once(cli: Cli, test_image: str, made: list[str]) -> None:
    made.append("pub-warn")
    out = cli("run", "-d", "--restart", "on-failure:2", "--name", "pub-warn", test_image, "true")
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(WARNING), out.stderr
    assert "contrib/systemd/ctrexec-supervise@.service" in lines[0]


def test_restart_on_failure_is_applied_by_ctrexec_supervise(
    cli: Cli, ex: Executor, test_image: str, made: list[str]
) -> None:
    made.append("pub-retry")
    sup = subprocess.Popen(cli.argv("supervise"), stderr=subprocess.PIPE, text=True)
    try:
        until(lambda: is_supervised(ex.client), "the supervisor's presence lock")
        out = cli(
            "run", "-d", "--restart", "on-failure:2", "--name", "pub-retry", test_image,
            "sh", "-c", "exit 3",
        )  # fmt: skip
        assert (out.returncode, out.stderr) == (0, ""), out.stderr
        until(lambda: ex.inspect("pub-retry").restart_count == 2, "two restarts", timeout=60)
        info = json.loads(cli("inspect", "pub-retry", check=True).stdout)[0]["Ctrexec"]
        assert info["config"]["restart"]["policy"] == "on-failure"
        assert info["config"]["restart"]["max_attempts"] == 2
        until(lambda: ex.inspect("pub-retry").exit is not None, "the last exit", timeout=60)
    finally:
        sup.send_signal(signal.SIGTERM)
        _, err = sup.communicate(timeout=30)
    assert sup.returncode == 0, err
    assert "Traceback" not in err
    assert ex.inspect("pub-retry").restart_count == 2
    assert not is_supervised(ex.client)


def test_run_interactive_with_publish_and_rm_cleans_up(
    cli: Cli, bridge: str, test_image: str
) -> None:
    port = free_port()
    argv = cli.argv(
        "run", "-i", "--rm", "-p", f"{port}:8080", "--name", "pub-attached", test_image,
        "sh", "-c", "read line; echo got $line; ip -4 -o addr show eth0",
    )  # fmt: skip
    out = subprocess.run(
        argv, input="hello\n", capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()
    assert first == "got hello" and "10.231.188." in second, out.stdout
    assert not Path(netns.resolve("cx-pub-attached")).exists()


def test_group_up_warns_once_about_an_unapplied_policy(
    cli: Cli, test_image: str, tmp_path: Path
) -> None:
    tasks = "".join(
        f'[[task]]\nname = "{n}"\nimage = "{test_image}"\ncommand = ["true"]\n'
        f'restart = {{ policy = "{policy}" }}\n'
        for n, policy in (("a", "on-failure"), ("b", "always"), ("c", "on-failure"))
    )
    file = tmp_path / "g.toml"
    file.write_text(f'name = "pubwarn"\nnetwork = "none"\n{tasks}')
    up = cli("group up", str(file))
    try:
        assert up.returncode == 0, up.stderr
        lines = up.stderr.splitlines()
        assert len(lines) == 1, up.stderr
        assert lines[0].startswith(
            "ctrexec: warning: restart policy always, on-failure: no `ctrexec supervise`"
        )
    finally:
        assert cli("group down", "pubwarn").returncode == 0


@pytest.fixture
def exposing_image(cli: Cli, containerd_address: str, tmp_path: Path) -> Iterator[str]:
    """The test image under another name, with ExposedPorts 8080/tcp and 9000/udp."""
    name = "docker.io/library/ctrexec-test-expose:latest"
    archive = tmp_path / "expose.tar"
    build_exposing_image(archive, name)
    import_image(containerd_address, TEST_NAMESPACE, archive)
    try:
        yield name
    finally:
        cli("rmi", name)


def test_publish_all_publishes_what_the_image_exposes(
    cli: Cli, bridge: str, exposing_image: str, made: list[str]
) -> None:
    made.append("pub-all")
    given = free_port()
    out = cli(
        "run", "-d", "-P", "-p", f"{given}:8080", "--name", "pub-all", exposing_image, *HTTPD
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = sorted(cli("port", "pub-all", check=True).stdout.splitlines())
    assert lines[0] == f"8080/tcp -> 0.0.0.0:{given}", lines  # -p wins over -P for 8080
    assert len(lines) == 2 and lines[1].startswith("9000/udp -> 0.0.0.0:"), lines
    body: list[bytes] = []
    until(lambda: _answered(body, given), "the given port to answer")


def test_publish_all_without_exposed_ports_still_gets_the_bridge(
    cli: Cli, bridge: str, test_image: str
) -> None:
    out = cli(
        "run", "--rm", "-P", "--name", "pub-none", test_image,
        "sh", "-c", "ip -4 -o addr show eth0 | grep -c 10.231.188.",
    )  # fmt: skip
    assert (out.returncode, out.stdout) == (0, "1\n"), out.stderr


def test_run_network_cni_joins_a_users_conflist_and_rm_releases_it(
    cli: Cli, bridge: str, test_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf_dir = tmp_path / "net.d"
    conf_dir.mkdir()
    user_bridge = f"{bridge}u"
    user = cni.bridge_conflist(
        f"{bridge}user", user_bridge, "10.231.189.0/24", ports=False,
        ipam_dir=str(tmp_path / "ipam"),
    )  # fmt: skip
    (conf_dir / "user.conflist").write_text(json.dumps(user.to_json()))
    monkeypatch.setenv("CTREXEC_CNI_CONF_DIR", str(conf_dir))
    try:
        out = cli(
            "run", "--rm", "--network", f"cni:{bridge}user", "--name", "pub-cni", test_image,
            "sh", "-c", "ip -4 -o addr show eth0 | grep -o 'inet 10\\.231\\.189\\.[0-9]*'",
        )  # fmt: skip
        assert (out.returncode, out.stdout.startswith("inet 10.231.189.")) == (0, True), out
        ports = cli("run", "--rm", "--network", f"cni:{bridge}user", "-p", "8080:80",
                    "--name", "pub-cni2", test_image, "true")  # fmt: skip
        assert ports.returncode == 125 and "has no portmap plugin" in ports.stderr, ports.stderr
        assert gone_netns("cx-pub-cni") and gone_netns("cx-pub-cni2")
    finally:
        subprocess.run(["ip", "link", "del", user_bridge], capture_output=True, check=False)
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True, check=True).stdout
    assert "10.231.189." not in rules


def gone_netns(name: str) -> bool:
    return not Path(netns.resolve(name)).exists()


def test_start_after_a_reboot_wires_the_namespace_again(
    cli: Cli, bridge: str, test_image: str, made: list[str]
) -> None:
    """A reboot empties /run: the namespace, CNI's cache and IPAM files, iptables rules
    and the task's host files all go. `start` makes and wires them again, ports included."""
    port = free_port()
    made.append("pub-boot")
    out = cli("run", "-d", "-p", f"{port}:8080", "--name", "pub-boot", test_image, *HTTPD)
    assert out.returncode == 0, out.stderr
    assert cli("stop", "-t", "1", "pub-boot").returncode == 0
    path = netns.resolve("cx-pub-boot")
    settings.from_env().teardown("pub-boot", path, "bridge")  # what the reboot took
    netns.remove(path)
    shutil.rmtree(_files_of(cli, "pub-boot"))
    start = cli("start", "pub-boot")
    assert (start.returncode, start.stdout) == (0, "pub-boot\n"), start.stderr
    body: list[bytes] = []
    until(lambda: _answered(body, port), "the port to answer after the reboot")
    info = json.loads(cli("inspect", "pub-boot", check=True).stdout)[0]["Ctrexec"]
    address = info["addresses"][0]["address"].split("/")[0]
    hosts = cli("exec", "pub-boot", "cat", "/etc/hosts", check=True).stdout
    assert f"{address}\tpub-boot" in hosts, hosts


def _files_of(cli: Cli, name: str) -> Path:
    info = json.loads(cli("inspect", name, check=True).stdout)[0]["Ctrexec"]
    return Path(info["labels"][lbl.HOSTFILES_DIR])


def test_rename_moves_the_network_with_the_container(
    cli: Cli, bridge: str, test_image: str, made: list[str]
) -> None:
    port = free_port()
    made += ["pub-ren", "pub-ren2"]
    out = cli("run", "-d", "-p", f"{port}:8080", "--name", "pub-ren", test_image, *HTTPD)
    assert out.returncode == 0, out.stderr
    running = cli("rename", "pub-ren", "pub-ren2")
    assert running.returncode == 125 and "stop it first" in running.stderr
    assert cli("stop", "-t", "1", "pub-ren").returncode == 0
    renamed = cli("rename", "pub-ren", "pub-ren2")
    assert (renamed.returncode, renamed.stderr) == (0, ""), renamed.stderr
    assert gone_netns("cx-pub-ren")
    assert cli("start", "pub-ren2").returncode == 0
    body: list[bytes] = []
    until(lambda: _answered(body, port), "the renamed container's port to answer")
    ps = cli("ps", "--format", "{{.Names}} {{.Group}} {{.Netns}}", check=True).stdout
    assert "pub-ren2 pub-ren2 /run/netns/cx-pub-ren2" in ps.splitlines(), ps
    assert cli("rm", "-f", "pub-ren2").returncode == 0
    assert gone_netns("cx-pub-ren2")
