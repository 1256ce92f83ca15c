"""The public calls a log reader needs (issue 38: the CLI's ``logs``, ``attach`` and
``inspect`` use only these): following until the log is whole, an entry's stream, the
checks before reading, the dropped bytes and the ``--log-opt`` vocabulary."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ctrexec import (
    LOG_DRIVERS,
    FailedPrecondition,
    InvalidArgument,
    Status,
    TaskConfig,
    TaskInfo,
    parse_log_opts,
    read_logs,
)
from ctrexec.logs.driver import encode_entry, encode_marker


def _info(tmp_path: Path, config: TaskConfig | None) -> TaskInfo:
    return TaskInfo(
        id="t", image="img", status=Status.STOPPED, pid=0, exit=None, netns_path=None,
        netns_mode="host", group=None, log_path=str(tmp_path / "task.log"), labels={},
        created_at=None, config=config,
    )  # fmt: skip


def test_following_an_exited_task_ends_with_what_the_driver_wrote_after_the_exit(
    tmp_path: Path,
) -> None:
    """The driver writes a last line with no newline only once its pipe is quiet, after
    the exit: ``exited`` ends the read only when that has had its time, and the read
    ends (without ``exited`` or ``stop`` it would follow for ever)."""
    log = tmp_path / "task.log"
    log.write_bytes(encode_entry("stdout", "one\n", 1) + encode_entry("stderr", "two\n", 2))
    late: list[bool] = []

    def wait(seconds: float) -> None:
        if not late:  # the task has exited; its driver flushes the last, partial line
            late.append(True)
            with log.open("ab") as f:
                f.write(encode_entry("stdout", "three", 3))
        time.sleep(seconds)

    got = list(read_logs(log, follow=True, exited=lambda: True, wait=wait, poll_interval=0.01))
    assert [(e.message, e.stderr) for e in got] == [
        ("one\n", False),
        ("two\n", True),
        ("three", False),
    ]
    assert got[-1].partial


def test_stop_still_ends_a_read_that_follows_until_exit(tmp_path: Path) -> None:
    log = tmp_path / "task.log"
    log.write_bytes(encode_entry("stdout", "one\n", 1))
    got = read_logs(log, follow=True, stop=lambda: True, exited=lambda: False)
    assert [e.message for e in got] == ["one\n"]


def test_the_file_drivers_merged_output_is_not_stderr(tmp_path: Path) -> None:
    log = tmp_path / "task.log"
    log.write_text("out\nerr\n")
    assert [e.stderr for e in read_logs(log, driver="file")] == [False, False]


def test_an_interactive_task_keeps_a_log_only_through_the_daemon(tmp_path: Path) -> None:
    tty = TaskConfig(name="t", image="img", tty=True)
    assert tty.interactive and TaskConfig(name="t", image="i", stdin_open=True).interactive
    assert not TaskConfig(name="t", image="img").interactive
    _info(tmp_path, tty).check_logs()  # json-file through the daemon: logged and copied
    _info(tmp_path, None).check_logs()  # a record of no config of ours: its driver's log
    _info(tmp_path, TaskConfig(name="t", image="img", log_driver="file")).check_logs()
    elsewhere = TaskConfig(name="t", image="img", tty=True, log_driver="file")
    with pytest.raises(FailedPrecondition, match="its output goes to `ctrexec attach t`"):
        _info(tmp_path, elsewhere).check_logs()
    by_process = TaskConfig(name="t", image="img", stdin_open=True, log_transport="process")
    with pytest.raises(FailedPrecondition, match="not to a log"):
        _info(tmp_path, by_process).check_logs()


def test_a_task_writing_to_the_callers_paths_has_no_log_to_read(tmp_path: Path) -> None:
    config = TaskConfig(name="t", image="img", stdout_path="/srv/out")
    with pytest.raises(FailedPrecondition) as caught:
        _info(tmp_path, config).check_logs()
    assert (
        str(caught.value)
        == "container t writes its output to /srv/out (stdout); ctrexec keeps no log"
    )


def test_dropped_bytes_are_the_markers_in_the_task_log(tmp_path: Path) -> None:
    info = _info(tmp_path, None)
    Path(info.log_path).write_bytes(
        encode_marker(100, "disk full", 1) + encode_entry("stdout", "x\n", 2)
        + encode_marker(23, "disk full", 3)
    )  # fmt: skip
    no_daemon = tmp_path / "state"  # no log daemon there: the files' count alone
    assert info.log_dropped_bytes(state_dir=no_daemon) == 123
    raw = _info(tmp_path, TaskConfig(name="t", image="img", log_driver="file"))
    assert raw.log_dropped_bytes(state_dir=no_daemon) == 0  # the shim blocks, drops nothing


def test_log_opts_are_docker_words_for_the_configs_fields() -> None:
    size, files, transport = parse_log_opts("json-file", ["max-size=1m", "max-file=5"])
    config = TaskConfig(
        name="t", image="img", log_max_size=size, log_max_files=files, log_transport=transport
    )
    assert (config.log_max_size, config.log_max_files, config.log_transport) == (
        1 << 20,
        5,
        "daemon",
    )
    assert LOG_DRIVERS[0] == TaskConfig(name="t", image="img").log_driver  # the default first
    assert set(LOG_DRIVERS) == {"json-file", "file", "none"}
    with pytest.raises(InvalidArgument, match="unknown log opt 'max-size' for file log driver"):
        parse_log_opts("file", ["max-size=1m"])


def test_a_reader_that_shows_times_is_refused_a_log_that_keeps_none(tmp_path: Path) -> None:
    """``logs -t``'s rule, the library's: the ``file`` driver (the shim's raw file) keeps
    no time per line; ``json-file`` does; ``none`` keeps no log at all, which
    ``read_logs`` says in docker's words, so the timestamps are not what is refused."""
    raw = _info(tmp_path, TaskConfig(name="t", image="img", log_driver="file"))
    raw.check_logs()
    with pytest.raises(InvalidArgument, match="the file log driver keeps no timestamps"):
        raw.check_logs(timestamps=True)
    _info(tmp_path, TaskConfig(name="t", image="img")).check_logs(timestamps=True)
    _info(tmp_path, TaskConfig(name="t", image="img", log_driver="none")).check_logs(
        timestamps=True
    )
