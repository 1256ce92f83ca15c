"""Tasks through the plugin, as Nomad's task runner drives them, on real containerd,
a namespace made as Nomad makes it (/var/run/netns/<allocID>) and a CNI bridge."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import grpc
import pytest
from _allocnet import GroupNetwork
from _harness import (
    AllocDir,
    check_inspect_response,
    check_start_response,
    task_config,
)
from _limits import OOM_LIMIT_MB
from _node import Node, agent_config
from google.protobuf import duration_pb2

from ctrexec._api.nomad.drivers import driver_pb2 as dpb
from ctrexec.containerd import containers
from ctrexec.net import hostfiles, nsinfo
from ctrexec.nomad.taskmap import container_id
from ctrexec.testing import audit, wait_for

pytestmark = [pytest.mark.usefixtures("restore_ip_forward")]
IMAGE = "docker.io/library/ctrexec-test:latest"


def start(
    node: Node, alloc: AllocDir, name: str, config: dict[str, Any], **kw: Any
) -> dpb.TaskHandle:
    tc = task_config(alloc, name, node.task_spec, config, **kw)
    resp = node.start(tc)
    check_start_response(resp)
    return resp.handle


def running(node: Node, task_id: str) -> bool:
    resp = node.plugin.driver.InspectTask(dpb.InspectTaskRequest(task_id=task_id), timeout=10)
    check_inspect_response(resp)
    return bool(resp.task.state == dpb.RUNNING)


Req, Op = dpb.ExecTaskStreamingRequest, dpb.ExecTaskStreamingIOOperation
HTTPD = {"image": IMAGE, "command": "httpd", "args": ["-f", "-p", "8080", "-h", "/var/www"]}


def fetch_cmd(url: str, out: str = "got") -> dict[str, Any]:
    """Retry until served (the server may still be binding), then exit with wget's code."""
    script = f"for i in $(seq 1 300); do wget -q -O /alloc/{out} {url} && exit 0; sleep 0.1; done; exit 1"
    return {"image": IMAGE, "command": "sh", "args": ["-c", script]}


def test_bridge_group_two_tasks(node: Node, alloc: AllocDir, group: GroupNetwork) -> None:
    web = start(node, alloc, "web", HTTPD, netns_path=group.path)
    wait_for(lambda: running(node, web.config.id), timeout=30, what="web running")
    for n, url in enumerate(("http://127.0.0.1:8080/", f"http://{group.ip}:8080/")):
        probe = start(node, alloc, "probe", fetch_cmd(url, f"got-{n}"), netns_path=group.path)
        result = node.wait(probe.config.id)
        assert (result.exit_code, result.signal) == (0, 0), url
        node.plugin.driver.DestroyTask(dpb.DestroyTaskRequest(task_id=probe.config.id, force=True))
    got = list((alloc.path / "alloc").glob("got-*"))
    assert len(got) == 2 and all(p.read_text() == "hello from ctrexec\n" for p in got)


SHOW_FILES = "cat /etc/hostname; echo --; tail -n 2 /etc/hosts; echo --; cat /etc/resolv.conf"


def _host_files(
    node: Node, alloc: AllocDir, group: GroupNetwork, nomad_client: Any, **kw: Any
) -> dict[str, str]:
    """Two tasks of one alloc, with extra_hosts and the group's dns block (servers
    and searches; options left to the host's), as StartTask gets them with ``kw``:
    task name -> what the task reads of its hostname, hosts tail and resolv.conf.
    Each task's files go with its DestroyTask."""
    config = {"image": IMAGE, "command": "sleep", "args": ["600"], "extra_hosts": ["db:10.9.0.1"]}
    seen = {}
    for name in ("hf-a", "hf-b"):
        tc = task_config(alloc, name, node.task_spec, config, netns_path=group.path, **kw)
        tc.dns.servers.append("192.0.2.53")
        tc.dns.searches.append("svc.test")
        resp = node.start(tc)
        check_start_response(resp)
        h = resp.handle
        wait_for(lambda h=h: running(node, h.config.id), timeout=30, what="task running")
        got = _exec(node, h.config.id, SHOW_FILES)
        assert got.result.exit_code == 0, got.stderr
        seen[name] = got.stdout.decode()
        node.plugin.driver.DestroyTask(dpb.DestroyTaskRequest(task_id=h.config.id, force=True))
        cid = container_id(h.config.id)
        files = hostfiles.task_dir(hostfiles.DEFAULT_DIR, nomad_client.namespace, cid)
        assert not files.directory.exists()
    return seen


def _want_resolv_conf() -> str:
    host = hostfiles.parse_resolv_conf(hostfiles.read_host_file(hostfiles.HOST_RESOLV))
    return hostfiles.render_dns(["192.0.2.53"], ["svc.test"], host.options)


def test_a_group_task_gets_its_hosts_files_as_under_a_real_agent(
    node: Node, alloc: AllocDir, group: GroupNetwork, nomad_client: Any
) -> None:
    """No hostsConfig (what a real agent sends this driver): the alloc's short id as
    every task's hostname, on the address the namespace's eth0 holds; the job's
    extra_hosts; the dns block, with the host's options for the part it leaves out."""
    seen = _host_files(node, alloc, group, nomad_client)
    me = alloc.alloc_id[:8]
    want = f"{me}\n--\n10.9.0.1\tdb\n{group.ip}\t{me}\n--\n{_want_resolv_conf()}"
    assert seen == {"hf-a": want, "hf-b": want}


def test_a_group_task_uses_hostsconfig_when_nomad_sends_it(
    node: Node, alloc: AllocDir, group: GroupNetwork, nomad_client: Any
) -> None:
    """hostsConfig's hostname and address win over the alloc's own (here an address
    the namespace doesn't hold, so the line can only have come from hostsConfig)."""
    seen = _host_files(node, alloc, group, nomad_client, hosts_config=("nomad-host", "10.9.0.7"))
    want = f"nomad-host\n--\n10.9.0.1\tdb\n10.9.0.7\tnomad-host\n--\n{_want_resolv_conf()}"
    assert seen == {"hf-a": want, "hf-b": want}


def test_killed_task_restarts_into_the_same_namespace(
    node: Node, alloc: AllocDir, group: GroupNetwork, nomad_client: Any
) -> None:
    web = start(node, alloc, "web", HTTPD, netns_path=group.path)
    wait_for(lambda: running(node, web.config.id), timeout=30, what="web running")
    node.plugin.driver.SignalTask(dpb.SignalTaskRequest(task_id=web.config.id, signal="SIGKILL"))
    result = node.wait(web.config.id)
    assert (result.exit_code, result.signal) == (137, 9)
    node.plugin.driver.DestroyTask(dpb.DestroyTaskRequest(task_id=web.config.id, force=True))
    # Nomad's restart policy: a new StartTask (new id) into the same namespace.
    again = start(node, alloc, "web", HTTPD, netns_path=group.path)
    wait_for(lambda: running(node, again.config.id), timeout=30, what="web running again")
    probe = start(
        node, alloc, "probe", fetch_cmd(f"http://{group.ip}:8080/"), netns_path=group.path
    )
    assert node.wait(probe.config.id).exit_code == 0
    assert nsinfo.inspect(group.ns.path).addresses_of("eth0")[0].cidr.startswith(group.ip + "/")
    # No pause container: only the two tasks exist in the plugin's namespace.
    ids = {c.id for c in containers.list_containers(nomad_client)}
    assert len(ids) == 2


def test_plugin_killed_during_wait_then_recovered(node: Node, alloc: AllocDir) -> None:
    script = "while [ ! -e /alloc/go ]; do sleep 0.1; done; exit 7"
    handle = start(node, alloc, "job", {"image": IMAGE, "command": "sh", "args": ["-c", script]})
    errors: list[grpc.StatusCode] = []

    def first_wait() -> None:
        try:
            node.wait(handle.config.id, timeout=120)
        except grpc.RpcError as exc:
            errors.append(exc.code())

    waiter = threading.Thread(target=first_wait)
    waiter.start()
    wait_for(lambda: running(node, handle.config.id), timeout=30, what="task running")
    node.plugin.sigkill()
    waiter.join(timeout=60)
    assert errors == [grpc.StatusCode.UNAVAILABLE]  # Nomad: ErrPluginShutdown
    node.plugin = node.launch()  # a new process: SetConfig, Init
    recover = dpb.RecoverTaskRequest(handle=handle)  # task_id empty, as Nomad sends it
    node.plugin.driver.RecoverTask(recover, timeout=30)
    node.plugin.driver.RecoverTask(recover, timeout=30)  # idempotent
    results: list[dpb.ExitResult] = []
    waiters = [
        threading.Thread(target=lambda: results.append(node.wait(handle.config.id, 120)))
        for _ in range(3)
    ]
    for w in waiters:
        w.start()
    (alloc.path / "alloc" / "go").write_text("")
    for w in waiters:
        w.join(timeout=120)
    assert [r.exit_code for r in results] == [7, 7, 7]


def test_stop_with_custom_signal_and_with_timeout(node: Node, alloc: AllocDir) -> None:
    trap = "trap 'exit 3' USR1; while true; do sleep 0.1; done"
    a = start(node, alloc, "usr1", {"image": IMAGE, "command": "sh", "args": ["-c", trap]})
    deaf = "trap '' TERM; while true; do sleep 0.1; done"
    b = start(node, alloc, "deaf", {"image": IMAGE, "command": "sh", "args": ["-c", deaf]})
    for h in (a, b):
        wait_for(lambda h=h: running(node, h.config.id), timeout=30, what="task running")
    node.plugin.driver.StopTask(
        dpb.StopTaskRequest(
            task_id=a.config.id, timeout=duration_pb2.Duration(seconds=30), signal="SIGUSR1"
        ),
        timeout=60,
    )
    assert node.wait(a.config.id).exit_code == 3
    node.plugin.driver.StopTask(
        dpb.StopTaskRequest(task_id=b.config.id, timeout=duration_pb2.Duration(nanos=500_000_000)),
        timeout=60,
    )
    result = node.wait(b.config.id)
    assert (result.exit_code, result.signal) == (137, 9)
    # StopTask keeps the state: Inspect still answers, with every field Go needs.
    assert not running(node, b.config.id)


def test_stats_and_events(node: Node, alloc: AllocDir) -> None:
    events = node.plugin.driver.TaskEvents(dpb.TaskEventsRequest(), timeout=120)
    h = start(node, alloc, "busy", {"image": IMAGE, "command": "sleep", "args": ["600"]})
    event = next(events)
    assert (event.alloc_id, event.task_name) == (alloc.alloc_id, "busy")
    assert event.message.startswith("Started")
    stats = node.plugin.driver.TaskStats(
        dpb.TaskStatsRequest(
            task_id=h.config.id, collection_interval=duration_pb2.Duration(nanos=100_000_000)
        ),
        timeout=120,
    )
    first, second = next(stats), next(stats)
    for s in (first, second):
        assert s.stats.HasField("timestamp")
        assert s.stats.agg_resource_usage.memory.usage > 0
    assert dpb.CPUUsage.PERCENT in second.stats.agg_resource_usage.cpu.measured_fields
    stats.cancel()
    events.cancel()


def test_alloc_dirs_are_mounted(node: Node, alloc: AllocDir) -> None:
    script = "echo a > /alloc/a && echo l > /local/l && echo s > /secrets/s && echo $NOMAD_TASK_NAME > /local/n"
    h = start(node, alloc, "fs", {"image": IMAGE, "command": "sh", "args": ["-c", script]})
    assert node.wait(h.config.id).exit_code == 0
    assert (alloc.path / "alloc" / "a").read_text() == "a\n"
    assert (alloc.path / "fs" / "local" / "l").read_text() == "l\n"
    assert (alloc.path / "fs" / "secrets" / "s").read_text() == "s\n"
    assert (alloc.path / "fs" / "local" / "n").read_text() == "fs\n"


@pytest.mark.parametrize(
    ("config", "code", "words"),
    [
        (
            {"image": IMAGE, "privileged": True},
            grpc.StatusCode.INVALID_ARGUMENT,
            "allow_privileged",
        ),
        (
            {"image": IMAGE, "cap_add": ["sys_admin"]},
            grpc.StatusCode.INVALID_ARGUMENT,
            "allow_caps",
        ),
        ({"image": IMAGE, "pids_limit": -3}, grpc.StatusCode.INVALID_ARGUMENT, "pids_limit"),
        # what a job author could take of the host (docs/security.md, ctrexec.nomad.policy)
        (
            {"image": IMAGE, "mount": [{"source": "/", "target": "/host"}]},
            grpc.StatusCode.INVALID_ARGUMENT,
            "allow_root_mount",
        ),
        (
            {"image": IMAGE, "device": [{"host_path": "/dev/fuse"}]},
            grpc.StatusCode.INVALID_ARGUMENT,
            "allow_devices",
        ),
        (
            {"image": IMAGE, "host_network": True},
            grpc.StatusCode.INVALID_ARGUMENT,
            "allow_host_network",
        ),
        (
            {"image": IMAGE, "sysctl": {"net.ipv4.ip_forward": "0"}},
            grpc.StatusCode.INVALID_ARGUMENT,
            "allow_host_sysctls",
        ),
        (  # a registry on loopback that nothing serves: the pull fails, nothing is made;
            # unreachable is recoverable (the RecoverableError detail), so Nomad retries
            {"image": "127.0.0.1:9/no-such-image:1"},
            grpc.StatusCode.FAILED_PRECONDITION,
            "127.0.0.1:9",
        ),
    ],
)
def test_bad_task_config_is_refused(
    node: Node, alloc: AllocDir, nomad_client: Any, config: dict[str, Any], code: Any, words: str
) -> None:
    _refused(node, alloc, nomad_client, config, code, words)


def test_job_volumes_are_refused_when_the_plugin_disables_them(
    containerd_address: str, nomad_image: str, nomad_client: Any, alloc: AllocDir
) -> None:
    strict = Node(containerd_address, agent_config(containerd_address, volumes_enabled=False))
    try:
        for config in (
            {"image": IMAGE, "volumes": ["/srv:/srv"]},
            {"image": IMAGE, "mount": [{"source": "/srv", "target": "/srv"}]},
        ):
            _refused(
                strict, alloc, nomad_client, config, grpc.StatusCode.INVALID_ARGUMENT,
                "volumes_enabled = false",
            )  # fmt: skip
    finally:
        strict.cleanup()


def _refused(
    node: Node, alloc: AllocDir, nomad_client: Any, config: dict[str, Any], code: Any, words: str
) -> None:
    """StartTask fails with one line naming ``words``, and has made nothing."""
    tc = task_config(alloc, "bad", node.task_spec, config)
    with pytest.raises(grpc.RpcError) as err:
        node.plugin.driver.StartTask(dpb.StartTaskRequest(task=tc), timeout=60)
    assert err.value.code() == code
    details = err.value.details() or ""
    assert words in details and "\n" not in details
    # nothing half-created: no container, task, lease or active snapshot, no host files
    assert audit(nomad_client) == []
    cid = container_id(tc.id)
    assert not hostfiles.task_dir(
        hostfiles.DEFAULT_DIR, nomad_client.namespace, cid
    ).directory.exists()


def test_destroy_unknown_task_is_fine(node: Node) -> None:
    node.plugin.driver.DestroyTask(dpb.DestroyTaskRequest(task_id="a/b/c", force=True), timeout=30)
    with pytest.raises(grpc.RpcError) as err:
        node.plugin.driver.WaitTask(dpb.WaitTaskRequest(task_id="a/b/c"), timeout=30)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


def test_many_waiters_hold_no_thread_each(node: Node, alloc: AllocDir) -> None:
    """100 WaitTask and 20 TaskStats calls open at once on a plugin whose thread
    count stays below the number of calls; then every waiter gets the exit."""
    script = "while [ ! -e /alloc/go ]; do sleep 0.1; done; exit 5"
    h = start(node, alloc, "many", {"image": IMAGE, "command": "sh", "args": ["-c", script]})
    wait_for(lambda: running(node, h.config.id), timeout=30, what="task running")
    req = dpb.WaitTaskRequest(task_id=h.config.id)
    waits = [node.plugin.driver.WaitTask.future(req, timeout=120) for _ in range(100)]
    interval = duration_pb2.Duration(seconds=1)
    streams = [
        node.plugin.driver.TaskStats(
            dpb.TaskStatsRequest(task_id=h.config.id, collection_interval=interval), timeout=120
        )
        for _ in range(20)
    ]
    for s in streams:
        next(s)  # each stream is being served
    assert running(node, h.config.id)  # and unary calls still get through
    assert _threads(node.plugin.proc.pid) < 100
    # A cancelled waiter is not an exit for the others.
    waits[0].cancel()
    (alloc.path / "alloc" / "go").write_text("")
    assert {w.result().result.exit_code for w in waits[1:]} == {5}
    for s in streams:
        s.cancel()


def test_oom_is_reported(node: Node, alloc: AllocDir) -> None:
    """Nomad's memory limit (memory_limit_bytes) is the task's; an OOM kill comes back
    in WaitTask's ExitResult and as a task event."""
    events = node.plugin.driver.TaskEvents(dpb.TaskEventsRequest(), timeout=120)
    hog = {"image": IMAGE, "command": "sh", "args": ["-c", "tail /dev/zero"]}
    h = start(node, alloc, "hog", hog, memory_mb=OOM_LIMIT_MB)
    result = node.wait(h.config.id)
    assert result.oom_killed and result.signal == 9
    messages = []
    for event in events:
        messages.append(event.message)
        if event.message == "OOM Killed":
            break
    assert messages[0].startswith("Started")
    events.cancel()


def test_task_that_exited_while_the_plugin_was_down(node: Node, alloc: AllocDir) -> None:
    """RecoverTask of a task that ended meanwhile: WaitTask answers at once with its code."""
    script = "while [ ! -e /alloc/go ]; do sleep 0.1; done; exit 9"
    h = start(node, alloc, "gone", {"image": IMAGE, "command": "sh", "args": ["-c", script]})
    wait_for(lambda: running(node, h.config.id), timeout=30, what="task running")
    node.plugin.sigkill()
    (alloc.path / "alloc" / "go").write_text("")
    node.plugin = node.launch()
    node.plugin.driver.RecoverTask(dpb.RecoverTaskRequest(handle=h), timeout=30)
    wait_for(lambda: not running(node, h.config.id), timeout=30, what="task exited")
    assert node.wait(h.config.id).exit_code == 9


def test_output_goes_to_nomads_fifos_across_a_restart(node: Node, alloc: AllocDir) -> None:
    """The shim writes Nomad's FIFOs itself: logmon (the harness's reader) gets stdout
    and stderr apart, and again after the task is started anew into the same FIFOs."""
    script = "echo out-$RUN; echo err-$RUN >&2"
    for run in ("1", "2"):
        h = start(node, alloc, "logs", {"image": IMAGE, "command": "sh", "args": ["-c", script]},
                  env={"RUN": run})  # fmt: skip
        assert node.wait(h.config.id).exit_code == 0
        for reader, stream in zip(alloc.readers, ("out", "err"), strict=True):
            line = f"{stream}-{run}\n".encode()
            wait_for(lambda r=reader, want=line: want in r.data, timeout=30, what=stream)
        node.plugin.driver.DestroyTask(dpb.DestroyTaskRequest(task_id=h.config.id, force=True))
    out, err = alloc.readers
    assert bytes(out.data) == b"out-1\nout-2\n" and bytes(err.data) == b"err-1\nerr-2\n"


def test_exec_task_captures_output_and_code(node: Node, alloc: AllocDir) -> None:
    h = start(node, alloc, "execd", {"image": IMAGE, "command": "sleep", "args": ["600"]})
    wait_for(lambda: running(node, h.config.id), timeout=30, what="task running")
    resp = _exec(node, h.config.id, "echo out; echo err >&2; exit 3")
    assert (resp.stdout, resp.stderr, resp.result.exit_code) == (b"out\n", b"err\n", 3)
    node.plugin.driver.DestroyTask(dpb.DestroyTaskRequest(task_id=h.config.id, force=True))


def _exec(node: Node, task_id: str, script: str) -> dpb.ExecTaskResponse:
    """ExecTask of ``sh -c SCRIPT``, as ``nomad alloc exec`` without a terminal."""
    return node.plugin.driver.ExecTask(
        dpb.ExecTaskRequest(
            task_id=task_id,
            command=["sh", "-c", script],
            timeout=duration_pb2.Duration(seconds=30),
        ),
        timeout=60,
    )


def _exec_stream(
    node: Node, requests: list[dpb.ExecTaskStreamingRequest]
) -> tuple[bytes, bytes, Any]:
    out, err, result = b"", b"", None
    for reply in node.plugin.driver.ExecTaskStreaming(iter(requests), timeout=60):
        out += reply.stdout.data
        err += reply.stderr.data
        if reply.exited:
            result = reply.result
    return out, err, result


def test_exec_task_streaming_with_stdin_and_with_a_tty(node: Node, alloc: AllocDir) -> None:
    """``nomad alloc exec``: stdin in and closed, streams out apart, then the exit; and
    with a terminal of the size asked."""
    h = start(node, alloc, "sexec", {"image": IMAGE, "command": "sleep", "args": ["600"]})
    wait_for(lambda: running(node, h.config.id), timeout=30, what="task running")
    setup = Req.Setup(task_id=h.config.id, command=["sh", "-c", "cat; echo err >&2; exit 4"])
    out, err, result = _exec_stream(
        node, [Req(setup=setup), Req(stdin=Op(data=b"hello\n")), Req(stdin=Op(close=True))]
    )
    assert (out, err, result.exit_code) == (b"hello\n", b"err\n", 4)
    tty = Req.Setup(task_id=h.config.id, command=["stty", "size"], tty=True)
    size = Req.TerminalSize(height=33, width=101)
    out, _err, result = _exec_stream(node, [Req(setup=tty, tty_size=size)])
    assert (out.strip(), result.exit_code) == (b"33 101", 0)
    node.plugin.driver.DestroyTask(dpb.DestroyTaskRequest(task_id=h.config.id, force=True))
