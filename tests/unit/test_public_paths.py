"""Every public path parameter takes a ``str`` and a ``pathlib.Path`` alike (issue 38:
one path type, :data:`ctrexec.StrPath`), and both give the same value, stored as it was
before (a TaskConfig's paths stay ``str`` in its JSON record; the Executor's, Path)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import ctrexec
from ctrexec import DaemonPaths, Executor, Supervisor, TaskConfig, load_group_file, parse_group


@pytest.mark.parametrize("name", ["log_dir", "stdout_path", "stderr_path"])
def test_task_config_paths_take_a_path_and_keep_a_str(name: str) -> None:
    as_text = TaskConfig(name="web", image="busybox", **{name: "/srv/alloc/out"})
    as_path = TaskConfig(name="web", image="busybox", **{name: Path("/srv/alloc/out")})
    assert as_path == as_text
    assert type(getattr(as_path, name)) is str
    assert as_path.to_json() == as_text.to_json()
    assert TaskConfig.from_json(as_path.to_json()) == as_text


def test_task_config_still_refuses_what_is_not_a_path() -> None:
    with pytest.raises(ctrexec.InvalidField):
        TaskConfig(name="web", image="busybox", log_dir=7)  # type: ignore[arg-type]
    with pytest.raises(ctrexec.InvalidArgument):
        TaskConfig(name="web", image="busybox", log_dir=Path("relative/logs"))


def test_executor_directories_take_a_str_or_a_path() -> None:
    client = object()
    as_text = Executor(client, log_dir="/l", files_dir="/f", state_dir="/s")  # type: ignore[arg-type]
    as_path = Executor(client, log_dir=Path("/l"), files_dir=Path("/f"), state_dir=Path("/s"))  # type: ignore[arg-type]
    for ex in (as_text, as_path):
        assert (ex.log_dir, ex.files_dir, ex.state_dir) == (Path("/l"), Path("/f"), Path("/s"))
    derived = Executor(client, state_dir="/s")  # type: ignore[arg-type]
    assert derived.files_dir == Path("/s/netns-files")


def test_daemon_paths_take_a_str_or_a_path() -> None:
    assert DaemonPaths.under("/var/tmp/cxd") == DaemonPaths.under(Path("/var/tmp/cxd"))
    given = DaemonPaths(root="/r", state="/s")
    assert given == DaemonPaths(root=Path("/r"), state=Path("/s"))
    assert given.address == "/s/containerd.sock"
    assert given.config == Path("/s/config.toml")


def test_supervisor_lock_dir_takes_a_str_or_a_path() -> None:
    ex = Executor(object(), log_dir="/l")  # type: ignore[arg-type]
    assert Supervisor(ex, lock_dir="/locks").lock_dir == Path("/locks")
    assert Supervisor(ex, lock_dir=Path("/locks")).lock_dir == Path("/locks")


def test_is_supervised_lock_dir_takes_a_str_or_a_path(tmp_path: Path) -> None:
    client = SimpleNamespace(address="/run/containerd/containerd.sock", namespace="ns")
    for lock_dir in (str(tmp_path), tmp_path):
        assert ctrexec.is_supervised(client, lock_dir) is False  # type: ignore[arg-type]


def test_group_files_and_bases_take_a_str_or_a_path(tmp_path: Path) -> None:
    (tmp_path / "web.env").write_text("A=1\n")
    group = tmp_path / "g.toml"
    group.write_text(
        'name = "g"\nnetwork = "none"\n'
        '[[task]]\nname = "web"\nimage = "busybox"\nenv_file = "web.env"\n'
    )
    assert load_group_file(str(group)) == load_group_file(group)
    data = {
        "name": "g",
        "network": "none",
        "task": [{"name": "web", "image": "busybox", "env_file": "web.env"}],
    }
    assert parse_group(data, base=str(tmp_path)) == parse_group(data, base=tmp_path)


def test_registry_logout_takes_a_str_or_a_path(tmp_path: Path) -> None:
    from ctrexec import registry_logout

    cfg = tmp_path / "config.json"
    for given in (cfg, str(cfg)):
        cfg.write_text('{"auths": {"reg.lan": {"auth": "dTpw"}}}')
        assert registry_logout("reg.lan", given) is True
        assert registry_logout("reg.lan", given) is False
