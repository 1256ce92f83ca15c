"""``--log-driver``/``--log-opt``: names, options, stdio URIs and reading, per driver."""

from __future__ import annotations

from pathlib import Path

import pytest

import ctrexec
from ctrexec.cli.main import build_parser, main
from ctrexec.cli.tasks import _config
from ctrexec.errors import FailedPrecondition, InvalidArgument, InvalidField
from ctrexec.groups.spec import parse_group
from ctrexec.logs import modes as logmodes
from ctrexec.logs import reader as logs
from ctrexec.tasks import output as taskoutput
from ctrexec.tasks.config import TaskConfig

pytestmark = pytest.mark.unit


def _parse(*argv: str) -> TaskConfig:
    return _config(build_parser().parse_args(["run", "--name", "t", *argv, "img"]))


def test_a_task_logs_with_its_config_s_driver_else_the_default() -> None:
    """Starting, reading and inspecting ask one rule; a record made by another client
    has no config of ours, and logs as the default would have made it."""
    assert logmodes.driver_of(None) == logmodes.JSON_FILE
    assert logmodes.driver_of(_parse("--log-driver", "none")) == logmodes.NONE
    assert logmodes.driver_of(_parse()) == logmodes.DEFAULT_DRIVER


def test_json_file_is_the_default_with_docker_s_limits() -> None:
    cfg = _parse()
    assert (cfg.log_driver, cfg.log_max_size, cfg.log_max_files) == (
        "json-file",
        logs.DEFAULT_MAX_SIZE,
        logs.DEFAULT_MAX_FILES,
    )


def test_log_opts_take_docker_sizes_and_counts() -> None:
    cfg = _parse("--log-driver", "json-file", "--log-opt", "max-size=2m", "--log-opt=max-file=5")
    assert (cfg.log_max_size, cfg.log_max_files) == (2 << 20, 5)


@pytest.mark.parametrize("driver", ["file", "none"])
def test_cheap_drivers_parse(driver: str) -> None:
    assert _parse("--log-driver", driver).log_driver == driver


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--log-driver", "syslog"], "unknown log driver 'syslog'; expected one of"),
        (["--log-driver", ""], "unknown log driver ''"),
        (["--log-opt", "max-size"], "unknown log opt 'max-size'"),
        (["--log-opt", "compress=true"], "unknown log opt 'compress'"),
        (["--log-opt", "max-size=lots"], "invalid size 'lots'"),
        (["--log-opt", "max-file=x"], "invalid max-file 'x'"),
        (["--log-opt", "max-file=0"], "for --log-opt max-file: max_files must be at least 1"),
        (["--log-opt", "max-size=0"], "for --log-opt max-size: max_size must be positive"),
        (["--log-driver", "file", "--log-opt", "max-size=1m"], "'max-size' for file log driver"),
        (["--log-driver", "none", "--log-opt", "max-file=2"], "'max-file' for none log driver"),
    ],
)
def test_bad_log_flags_are_one_line_125_and_connect_to_nothing(
    flags: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The socket does not exist: the flags must be refused before any connection.
    argv = ["run", "--address", str(tmp_path / "none.sock"), *flags, "img", "true"]
    assert main(argv) == 125
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("ctrexec: ") and expected in lines[0], lines[0]
    assert list(tmp_path.iterdir()) == []


def test_limits_given_to_a_driver_that_does_not_rotate_are_refused() -> None:
    with pytest.raises(InvalidField, match="the file log driver does not rotate"):
        TaskConfig(name="t", image="img", log_driver="file", log_max_files=5)
    assert TaskConfig(name="t", image="img", log_driver="none").log_driver == "none"


def test_config_round_trips_the_driver() -> None:
    cfg = TaskConfig(name="t", image="img", log_driver="file")
    assert TaskConfig.from_json(cfg.to_json()) == cfg


def test_group_file_key_log_driver() -> None:
    task = {"name": "web", "image": "img", "log_driver": "none"}
    spec = parse_group({"name": "g", "network": "none", "task": [task]})
    assert spec.task_configs()[0].log_driver == "none"
    with pytest.raises(InvalidArgument, match=r"task web: .*unknown log driver 'x'"):
        parse_group({"name": "g", "network": "none", "task": [{**task, "log_driver": "x"}]})


def test_stdio_per_driver(tmp_path: Path) -> None:
    path = tmp_path / "a b" / "task.log"
    none = TaskConfig(name="t", image="img", log_driver="none")
    assert taskoutput.stdio_for(none, str(path)) == ("", "", "")
    assert not path.parent.exists()  # nothing made for a task that logs nothing
    file = TaskConfig(name="t", image="img", log_driver="file")
    uri = f"file://{tmp_path}/a%20b/task.log"
    assert taskoutput.stdio_for(file, str(path)) == (uri, uri, "")
    assert path.parent.is_dir()
    process = TaskConfig(name="t", image="img", log_transport="process")
    out, err, token = taskoutput.stdio_for(process, str(path))
    assert out == err and out.startswith("binary://") and not token
    assert not taskoutput.uses_daemon(process)
    assert taskoutput.uses_daemon(TaskConfig(name="t", image="img"))


def test_log_opt_transport() -> None:
    assert logmodes.parse_log_opts("json-file", ["transport=process"])[2] == "process"
    assert logmodes.parse_log_opts("json-file", [])[2] == "daemon"
    with pytest.raises(InvalidArgument, match="unknown log transport 'x'"):
        logmodes.parse_log_opts("json-file", ["transport=x"])
    with pytest.raises(InvalidArgument, match="for file log driver"):
        logmodes.parse_log_opts("file", ["transport=process"])
    with pytest.raises(InvalidArgument, match="does not rotate"):
        TaskConfig(name="t", image="img", log_driver="none", log_transport="process")


def test_none_has_nothing_to_read(tmp_path: Path) -> None:
    with pytest.raises(FailedPrecondition, match="does not support reading"):
        list(logs.read_logs(tmp_path / "task.log", driver="none"))


def test_file_logs_read_raw_with_the_unterminated_rest(tmp_path: Path) -> None:
    path = tmp_path / "task.log"
    path.write_bytes(b"out 1\nerr 2\nno newline")
    entries = list(logs.read_logs(path, driver="file"))
    assert [e.message for e in entries] == ["out 1\n", "err 2\n", "no newline"]
    assert {e.stream for e in entries} == {logs.OUTPUT}
    tail = list(logs.read_logs(path, driver="file", tail=1))
    assert [e.message for e in tail] == ["no newline"]
    with pytest.raises(InvalidArgument, match="keeps no timestamps"):
        list(logs.read_logs(path, driver="file", since=0))


def test_following_a_raw_log_prints_the_rest_of_a_line_once(tmp_path: Path) -> None:
    path = tmp_path / "task.log"
    path.write_bytes(b"abc")
    got: list[str] = []
    for entry in logs.read_logs(
        path, driver="file", follow=True, stop=lambda: len(got) >= 3, poll_interval=0.01
    ):
        got.append(entry.message)
        if len(got) == 1:
            with path.open("ab") as f:
                f.write(b"def\nghi\n")
    assert "".join(got) == "abcdef\nghi\n"


def test_logs_timestamps_refused_for_the_file_driver(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``logs -t`` says the library's refusal (TaskInfo.check_logs) in one line, 125."""
    import ctrexec
    from ctrexec.cli import tasks as cli_tasks

    info = ctrexec.TaskInfo(
        id="t", image="img", status=ctrexec.Status.STOPPED, pid=0, exit=None,
        netns_path=None, netns_mode="host", group=None, log_path=str(tmp_path / "task.log"),
        labels={}, created_at=None, config=TaskConfig(name="t", image="img", log_driver="file"),
    )  # fmt: skip
    monkeypatch.setattr(cli_tasks, "connect", lambda _args: object())
    monkeypatch.setattr(cli_tasks, "resolver", lambda _client: lambda word: word)
    monkeypatch.setattr(ctrexec, "inspect_task", lambda *_a, **_kw: info)
    assert main(["logs", "-t", "t"]) == 125
    assert capsys.readouterr().err.strip() == "ctrexec: the file log driver keeps no timestamps"


def test_docker_size_writes_the_largest_exact_unit() -> None:
    from ctrexec.cli.runflags import docker_size
    from ctrexec.oci.resources import parse_size

    cases = [(10 << 20, "10m"), (1 << 30, "1g"), (512 << 10, "512k"), (1536, "1536"), (0, "0")]
    for size, text in cases:
        assert docker_size(size) == text
        assert parse_size(text) == size


def test_run_help_shows_the_log_defaults_from_defaults(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--log-opt``'s help is formatted from ctrexec.defaults, not written by hand."""
    from ctrexec import defaults
    from ctrexec.cli.runflags import docker_size

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps the help
    size = docker_size(defaults.DEFAULT_LOG_MAX_SIZE)
    assert f"max-size={size}, max-file={defaults.DEFAULT_LOG_MAX_FILES}," in shown
    # The help reads the public names (each loaded once from ctrexec.defaults).
    monkeypatch.setattr(ctrexec, "DEFAULT_LOG_MAX_SIZE", 2 << 20)
    monkeypatch.setattr(ctrexec, "DEFAULT_LOG_MAX_FILES", 7)
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "max-size=2m, max-file=7, transport=daemon|process" in shown
