"""Every field of a TaskConfig and of a group file: wrong types and out-of-range values.

Each must fail as one InvalidArgument line that names the key, the value and what
was expected (for a group file also the file and the task), never as a TypeError.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from ctrexec.errors import InvalidArgument, InvalidField
from ctrexec.groups import spec as groups
from ctrexec.oci import resources
from ctrexec.tasks import spec as taskspec
from ctrexec.tasks.config import RestartPolicy, TaskConfig

pytestmark = pytest.mark.unit

# key -> (a value of the wrong type, what the error says is expected)
WRONG_TYPE: dict[str, tuple[Any, str]] = {
    "name": (5, "expected a string"),
    "image": (["img"], "expected a string"),
    "command": ("echo hi", "expected a list of strings"),
    "entrypoint": (["sh", 1], "expected a list of strings"),
    "env": (["A=1"], "expected a table of strings"),
    "workdir": (5, "expected a string"),
    "user": (1000, "expected a string"),
    "netns": (None, "expected a string"),
    "hostname": (True, "expected a string"),
    "dns": ("1.1.1.1", "expected a list of strings"),
    "dns_search": ([3], "expected a list of strings"),
    "dns_options": ("ndots:2", "expected a list of strings"),
    "extra_hosts": ("db:10.0.0.7", "expected a list of strings"),
    "volumes": ("/a:/b", "expected a list of strings"),
    "tmpfs": ({"/run": "size=1m"}, "expected a list of strings"),
    "mounts": ("type=tmpfs,dst=/t", "expected a list of strings"),
    "read_only": ("yes", "expected true or false"),
    "memory": (1.5, "expected a size such as 512m"),
    "memory_reservation": (2.5, "expected a size such as 256m"),
    "cpus": ("2", "expected a number"),
    "cpu_shares": (1.5, "expected an integer"),
    "cpuset_cpus": (1, "expected a string"),
    "cgroup": (1, "expected a string"),
    "cpuset_cgroup": (["/a"], "expected a string"),
    "pids_limit": ("100", "expected an integer"),
    "cap_add": ("NET_ADMIN", "expected a list of strings"),
    "cap_drop": ([None], "expected a list of strings"),
    "privileged": (1, "expected true or false"),
    "devices": ("/dev/null", "expected a list of strings"),
    "sysctls": ({"net.ipv4.ip_forward": True}, "expected a table of strings"),
    "oom_score_adj": (True, "expected an integer"),
    "annotations": ("a=b", "expected a table of strings"),
    "labels": ({"a": ["b"]}, "expected a table of strings"),
    "tty": (0, "expected true or false"),
    "init": ("yes", "expected true or false"),
    "pid": (1, "expected a string"),
    "ipc": (["host"], "expected a string"),
    "platform": (["linux/arm64"], "expected a string"),
    "security_opt": ("seccomp=unconfined", "expected a list of strings"),
    "group_add": ("audio", "expected a list of strings"),
    "memory_swap": (1.5, "expected a size such as 1g, or -1"),
    "shm_size": ([1], "expected a size such as 256m"),
    "ulimits": ("nofile=1", "expected a list of strings"),
    "stdin_open": (0, "expected true or false"),
    "group": (["g"], "expected a string"),
    "share_shim": ("true", "expected true or false"),
    "runtime": (5, "expected a string"),
    "stop_signal": (["TERM"], "expected a string"),
    "stop_timeout": ("10", "expected a number"),
    "log_driver": (["json-file"], "expected a string"),
    "log_max_size": (1.0, "expected an integer"),
    "log_max_files": ("3", "expected an integer"),
    "log_transport": (1, "expected a string"),
    "stdout_path": (3, "expected a string"),
    "stderr_path": (b"/x", "expected a string"),
    "snapshotter": (None, "expected a string"),
    "auto_remove": ("no", "expected true or false"),
    "restart": ("always", "expected a table with policy, max_attempts, delay"),
    "log_dir": (["/logs"], "expected a string"),
}

# key -> (a value of the right type but out of range or malformed, what is expected)
OUT_OF_RANGE: dict[str, tuple[Any, str]] = {
    "name": ("a/b", "invalid container name"),
    "image": ("", "must not be empty"),
    "command": (["a\x00b"], "NUL"),
    "entrypoint": (["\x00"], "NUL"),
    "env": ({"": "x"}, "KEY=VALUE"),
    "workdir": ("relative", "absolute"),
    "user": ("1:", "empty group"),
    "hostname": ("-bad-", "RFC 1123"),
    "dns": (["dns.example"], "nameserver 'dns.example' is not an IP address"),
    "extra_hosts": (["db:host-gateway"], "host-gateway is not supported"),
    "memory": ("1k", "Minimum memory limit allowed is 6MB"),
    "memory_reservation": ("lots", "invalid size"),
    "memory_swap": ("lots", "invalid size"),
    "pid": ("container:web", "container:NAME is not supported by ctrexec"),
    "ipc": ("hots", "--ipc: invalid IPC mode 'hots'"),
    "platform": ("linux/arm64/v8/x", "invalid platform 'linux/arm64/v8/x': use os/arch[/variant]"),
    "security_opt": (["apparmor=x"], "--security-opt apparmor is not supported by ctrexec"),
    "group_add": (["99999999999"], "gid 99999999999 is out of range"),
    "shm_size": ("0", "shm size must be above 0"),
    "ulimits": (
        ["nofile=2:1"],
        "ulimit soft limit must be less than or equal to hard limit: 2 > 1",
    ),
    "cpus": (5000, f"between {resources.MIN_CPUS} and {resources.MAX_CPUS}"),
    "cpu_shares": (1, "between 2 and 262144"),
    "cpuset_cpus": ("3-1", "backwards"),
    "cgroup": ("/nomad/../x", "without '..'"),
    "cpuset_cgroup": ("nomad/share", "absolute"),
    "pids_limit": (0, "positive number or -1"),
    "cap_add": (["NET_NOPE"], "unknown capability"),
    "cap_drop": ([""], "non-empty"),
    "sysctls": ({"kernel.shmmax": "1"}, "only net.* sysctls"),
    "oom_score_adj": (1001, "between -1000 and 1000"),
    "annotations": ({" ": "x"}, "non-empty"),
    "labels": ({"io.ctrexec.managed": "x"}, "reserved for ctrexec"),
    "group": ("a b", "invalid group name"),
    "stop_timeout": (-1, "must not be negative"),
    "log_driver": ("syslog", "unknown log driver 'syslog'; expected one of json-file, file"),
    "log_max_size": (0, "must be positive"),
    "log_max_files": (0, "at least 1"),
    "log_transport": ("udp", "unknown log transport 'udp'; expected one of daemon, process"),
    "stdout_path": ("out.txt", "expected an absolute path"),
    "stderr_path": ("", "expected an absolute path"),
    "snapshotter": ("../x", "invalid snapshotter"),
    "restart": ({"policy": "sometimes"}, "expected one of no, on-failure, always"),
    "log_dir": ("logs", "must be an absolute path"),
    # Checked by taskspec.check_config: they need the host or parse into mounts.
    "volumes": (["/no/such/dir:/data"], "does not exist"),
    "tmpfs": (["relative"], "absolute"),
    "mounts": (["type=bind,src=/no/such/dir,dst=/d"], "bind source path does not exist"),
    "devices": (["/dev/null:/dev/x:q"], "letters from 'rwm'"),
    "runtime": ("nosuchrt", "unknown runtime"),
    "stop_signal": ("SIGNOPE", "invalid signal"),
}
# netns: any string is a name or a path, resolved and verified on create.
NO_RANGE = {
    "dns_search",
    "dns_options",
    "netns",
    "read_only",
    "privileged",
    "init",
    "tty",
    "stdin_open",
    "share_shim",
    "auto_remove",
}

RESTART_BAD: dict[str, tuple[Any, str]] = {
    "policy": (1, "restart.policy = 1: expected a string"),
    "max_attempts": (-1, "restart.max_attempts = -1: must not be negative"),
    "delay": ("1s", "restart.delay = '1s': expected a number"),
    "retries": (3, "restart = {'retries': 3}: unknown key(s) retries"),
}

GOOD_TASK: dict[str, Any] = {
    "name": "t",
    "image": "img",
    "command": ["-c", "true"],
    "entrypoint": ["sh"],
    "env": {"PORT": 8080, "MODE": "x"},
    "workdir": "/srv",
    "hostname": "t-host",
    "user": "app:staff",
    "volumes": ["/tmp:/data:ro"],
    "tmpfs": ["/run:size=1m"],
    "mounts": ["type=tmpfs,dst=/t,tmpfs-size=1m", "type=volume,src=data,dst=/data"],
    "read_only": True,
    "memory": "64m",
    "cpus": 1,
    "cpu_shares": 512,
    "pids_limit": -1,
    "cap_add": ["NET_ADMIN"],
    "cap_drop": ["ALL"],
    "stop_signal": 9,
    "stop_timeout": 2.5,
    "restart": {"policy": "on-failure", "max_attempts": 3, "delay": 0},
    "labels": {"team": "web"},
    "sysctls": {"net.ipv4.ip_unprivileged_port_start": "0"},
    "runtime": "runc",
    "log_driver": "json-file",
    "log_max_size": 1 << 20,
    "log_max_files": 2,
    "log_transport": "process",
    "extra_hosts": ["db:10.0.0.7"],
    "dns": ["192.0.2.53"],
    "dns_search": ["example.test"],
    "dns_options": ["ndots:2"],
    "memory_swap": "128m",
    "shm_size": "1g",
    "ulimits": ["nofile=2048:4096", "core=0"],
    "group_add": ["audio", "1234"],
    "pid": "host",
    "ipc": "private",
    "platform": "linux/arm64",
    "security_opt": ["no-new-privileges=false", "seccomp=unconfined"],
    "init": False,  # True needs the host's tini: tests/unit/test_oci_process.py
}


def _config(key: str, value: Any) -> TaskConfig:
    values: dict[str, Any] = {"name": "t", "image": "img", key: value}
    return TaskConfig(**values)


def _checked(key: str, value: Any) -> None:
    taskspec.check_config(_config(key, value))


def _field_error(key: str, value: Any) -> InvalidField:
    with pytest.raises(InvalidField) as info:
        _checked(key, value)
    return info.value


#: Group file keys that are read into other fields (tests/unit/test_envfile.py checks them).
GROUP_ONLY = {"env_file"}


def test_the_tables_cover_every_field() -> None:
    names = {f.name for f in attrs.fields(TaskConfig)}
    assert set(WRONG_TYPE) == names
    assert set(OUT_OF_RANGE) | NO_RANGE == names
    assert names >= groups._TASK_KEYS - GROUP_ONLY


@pytest.mark.parametrize("key", sorted(WRONG_TYPE))
def test_wrong_type_names_the_field(key: str) -> None:
    value, expected = WRONG_TYPE[key]
    err = _field_error(key, value)
    assert err.field == key
    assert str(err).startswith(f"{key} = ")
    assert expected in str(err)


@pytest.mark.parametrize("key", sorted(OUT_OF_RANGE))
def test_out_of_range_names_the_field(key: str) -> None:
    value, expected = OUT_OF_RANGE[key]
    err = _field_error(key, value)
    assert err.field.split(".")[0] == key
    assert expected in str(err)
    assert "\n" not in str(err)


@pytest.mark.parametrize("key", sorted(RESTART_BAD))
def test_restart_keys(key: str) -> None:
    value, message = RESTART_BAD[key]
    with pytest.raises(InvalidField) as info:
        _config("restart", {key: value})
    assert message in str(info.value)
    if key in {f.name for f in attrs.fields(RestartPolicy)}:
        with pytest.raises(InvalidArgument):
            RestartPolicy(**{key: value})


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_numbers_must_be_finite(value: float) -> None:
    assert "finite" in str(_field_error("stop_timeout", value))
    assert "finite" in str(_field_error("cpus", value))


def test_a_good_config_is_kept_as_given() -> None:
    cfg = TaskConfig(**{**GOOD_TASK, "name": "t"})
    assert cfg.env == {"PORT": "8080", "MODE": "x"}
    assert cfg.stop_signal == "9"
    assert cfg.restart == RestartPolicy(policy="on-failure", max_attempts=3, delay=0)
    assert TaskConfig.from_json(cfg.to_json()) == cfg


def test_from_json_refuses_a_bad_restart_table_cleanly() -> None:
    data = TaskConfig(name="t", image="img").to_json()
    with pytest.raises(InvalidField, match="restart"):
        TaskConfig.from_json({**data, "restart": {"policy": "no", "bogus": 1}})
    with pytest.raises(InvalidArgument, match="invalid task config"):
        TaskConfig.from_json({"name": "t"})


# -- group files --------------------------------------------------------------------


def _group(task: dict[str, Any], **group: Any) -> dict[str, Any]:
    return {"name": "g", **group, "task": [task]}


def _group_error(data: dict[str, Any]) -> str:
    with pytest.raises(InvalidArgument) as info:
        groups.parse_group(data, source="group file g.toml")
    text = str(info.value)
    assert "\n" not in text
    return text


def test_a_group_with_every_task_key_parses() -> None:
    assert set(GOOD_TASK) == groups._TASK_KEYS - GROUP_ONLY
    spec = groups.parse_group(_group(GOOD_TASK))
    (cfg,) = spec.task_configs()
    assert cfg.name == "g-t" and cfg.group == "g"
    assert cfg.hostname == "t-host"  # a task's own hostname wins over the group's


def test_a_group_task_without_a_hostname_takes_the_groups() -> None:
    task = {"name": "t", "image": "img"}
    assert groups.parse_group(_group(task)).task_configs()[0].hostname == "g"
    spec = groups.parse_group(_group(task, hostname="shared"))
    assert spec.task_configs()[0].hostname == "shared"


GROUP_TASK_CASES = [("wrong-type", k) for k in sorted(groups._TASK_KEYS - GROUP_ONLY)] + [
    ("out-of-range", k) for k in sorted(groups._TASK_KEYS & set(OUT_OF_RANGE))
]


@pytest.mark.parametrize(("table", "key"), GROUP_TASK_CASES)
def test_group_task_key_errors_name_file_task_key_value(table: str, key: str) -> None:
    value, expected = (WRONG_TYPE if table == "wrong-type" else OUT_OF_RANGE)[key]
    text = _group_error(_group({**GOOD_TASK, key: value}))
    task = "t" if key != "name" else value if isinstance(value, str) else "1"
    shown = list(value) if isinstance(value, tuple) else value
    if key == "restart" and isinstance(value, dict):
        shown = value["policy"]  # named as restart.policy
    assert text.startswith(f"group file g.toml: task {task}: {key}"), text
    assert repr(shown) in text, text
    assert expected.replace("container name", "task name") in text, text


GROUP_BAD: dict[str, list[tuple[Any, str]]] = {
    "name": [(5, "expected a string"), ("a/b", "invalid group name")],
    "network": [(["bridge"], "expected a string"), ("weird", "network mode")],
    "hostname": [(5, "expected a string"), ("a_b", "RFC 1123")],
    "ports": [("8080:80", "expected a list of strings"), (["70000:80"], "70000")],
    "task": [({"name": "t"}, "[[task]]"), ([], "[[task]]")],
}


@pytest.mark.parametrize(
    ("key", "case"), [(k, i) for k, cases in sorted(GROUP_BAD.items()) for i in range(2)]
)
def test_group_key_errors_name_file_key_value(key: str, case: int) -> None:
    value, expected = GROUP_BAD[key][case]
    data = {"name": "g", "task": [{"name": "t", "image": "img"}], key: value}
    text = _group_error(data)
    assert text.startswith("group file g.toml: "), text
    if key != "task":
        assert f"{key} = {value!r}" in text, text
    assert expected in text, text


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"task": [{"name": "t", "image": "i"}]}, "'name' is required"),
        ({"name": "g", "colour": "red", "task": [{"name": "t", "image": "i"}]}, "colour"),
        ({"name": "g", "task": [{"name": "t"}]}, "task t: 'image' is required"),
        ({"name": "g", "task": [{"image": "i"}]}, "task 1: 'name' is required"),
        ({"name": "g", "task": ["x"]}, "task 1: expected a [[task]] table"),
        ({"name": "g", "task": [{"name": "t", "image": "i", "bogus": 1}]}, "bogus"),
        (
            {"name": "g", "task": [{"name": "t", "image": "i"}, {"name": "t", "image": "i"}]},
            "task t: name = 't': another task",
        ),
        (
            {
                "name": "g",
                "network": "host",
                "ports": ["1:2"],
                "task": [{"name": "t", "image": "i"}],
            },
            "ports need network",
        ),
    ],
)
def test_group_structure_errors(data: dict[str, Any], expected: str) -> None:
    text = _group_error(data)
    assert text.startswith("group file g.toml: ") and expected in text, text


@pytest.mark.parametrize("policy", ["on-failure", "always", "unless-stopped"])
def test_auto_remove_with_a_restart_policy_is_refused_as_the_cli_refuses_it(policy: str) -> None:
    """Issue 38: the CLI's ``--rm --restart`` is refused, so the library's same config is
    too (a removed container has nothing to restart); ``no`` is no policy."""
    with pytest.raises(InvalidField, match=r"nothing to restart") as caught:
        TaskConfig(name="a", image="i", auto_remove=True, restart={"policy": policy})
    assert caught.value.field == "restart"
    assert caught.value.conflicts_with == "auto_remove"  # the CLI says --restart and --rm
    assert TaskConfig(name="a", image="i", auto_remove=True, restart={"policy": "no"}).auto_remove
