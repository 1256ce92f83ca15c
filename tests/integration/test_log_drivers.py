"""``--log-driver json-file|file|none`` end to end, through the CLI and the session's containerd.

Each driver keeps what it promises (``ctrexec.logs.modes``): ``logs`` and ``logs -f``
from a CLI process other than the one that started the task, the streams apart where
the driver has them, the disk bound where it has one, and nothing at all for ``none``.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import TEST_NAMESPACE, Cli
from _support import until

from ctrexec.logs import client as logdaemon_client
from ctrexec.logs import reader as logs

CHATTY = "echo out; echo err >&2; i=0; while :; do echo line $i; i=$((i+1)); sleep 0.2; done"


@pytest.fixture
def names(cli: Cli) -> Iterator[list[str]]:
    """Task names a test made; removed even when it fails."""
    made: list[str] = []
    yield made
    for name in made:
        cli("rm", "--force", name)


def _log(cli: Cli, name: str) -> Path:
    assert cli.log_dir is not None
    return cli.log_dir / TEST_NAMESPACE / name / "task.log"


#: The CLI flags of each way to log that keeps a file.
DRIVER_FLAGS = {
    "json-file": ["--log-driver", "json-file"],
    "process": ["--log-driver", "json-file", "--log-opt", "transport=process"],
    "file": ["--log-driver", "file"],
}


def _drivers_writing(path: Path) -> list[int]:
    """Pids of ctrexec log driver processes writing ``path``."""
    found = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if any(logs.DRIVER_NAME.encode() in a for a in argv[:3]) and str(path).encode() in argv:
                found.append(int(proc.name))
    return found


@pytest.mark.parametrize("driver", list(DRIVER_FLAGS))
def test_logs_and_follow_outlive_the_cli_that_started_the_task(
    driver: str, cli: Cli, test_image: str, names: list[str]
) -> None:
    name = f"logdrv-{driver}"
    names.append(name)
    started = cli(
        "run", "-d", *DRIVER_FLAGS[driver], "--name", name, test_image, "sh", "-c", CHATTY
    )
    assert started.returncode == 0, started.stderr  # that CLI process has exited
    until(lambda: "line 1" in cli("logs", name).stdout, f"{name}: line 1 in logs")
    shown = cli("logs", name)
    assert shown.returncode == 0, shown.stderr
    if driver in ("json-file", "process"):  # the streams stay apart
        assert shown.stdout.startswith("out\nline 0\n") and shown.stderr == "err\n"
        # The shared daemon writes it, or a process of its own, never both.
        assert (_drivers_writing(_log(cli, name)) != []) == (driver == "process")
        assert (logdaemon_client.registrations(_log(cli, name)) != []) == (driver == "json-file")
    else:  # the shim writes both streams to one file, itself
        # Two pipes copied into one file: each stream keeps its order, not the two together.
        lines = shown.stdout.splitlines()
        assert lines.count("err") == 1
        assert [line for line in lines if line != "err"][:2] == ["out", "line 0"]
        assert shown.stderr == ""
        assert _drivers_writing(_log(cli, name)) == []
    with subprocess.Popen(
        cli.argv("logs", "-f", name), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as follower:
        assert follower.stdout is not None and follower.stderr is not None
        try:
            seen = [follower.stdout.readline() for _ in range(3)]
            before = cli("logs", name).stdout.count("\n")
            until(
                lambda: cli("logs", name).stdout.count("\n") > before + 2,
                "more lines while followed",
            )
            assert cli("kill", name).returncode == 0
            follower.wait(timeout=60)  # -f ends once the task has exited (output is small)
        finally:
            if follower.poll() is None:
                follower.kill()
        rest = follower.stdout.read()  # not communicate(): it skips readline's buffer
        assert follower.returncode == 0, follower.stderr.read()
    # It printed the lines written while it followed, and stopped after the exit.
    assert "".join(seen) + rest == cli("logs", name).stdout


@pytest.mark.parametrize("driver", list(DRIVER_FLAGS))
def test_attached_run_prints_the_output(driver: str, cli: Cli, test_image: str) -> None:
    name = f"logdrv-att-{driver}"
    out = cli(
        "run",
        "--rm",
        *DRIVER_FLAGS[driver],
        "--name",
        name,
        test_image,
        "sh",
        "-c",
        "echo hi; printf end",
    )
    assert (out.returncode, out.stdout) == (0, "hi\nend"), out.stderr


def test_json_file_max_size_bounds_the_disk(cli: Cli, test_image: str, names: list[str]) -> None:
    name = "logdrv-bound"
    names.append(name)
    opts = ["--log-opt", "max-size=4k", "--log-opt", "max-file=2"]
    script = "i=0; while [ $i -lt 3000 ]; do echo line $i; i=$((i+1)); done; echo done"
    started = cli("run", "-d", *opts, "--name", name, test_image, "sh", "-c", script)
    assert started.returncode == 0, started.stderr
    until(lambda: cli("logs", "--tail", "1", name).stdout == "done\n", "the last line")
    log = _log(cli, name)
    files = [log, *(Path(p) for p in logs.rotated_paths(log))]
    assert len(files) == 2, files  # max-file=2: the current file and one rotated
    assert sum(f.stat().st_size for f in files) <= 2 * 4096  # one entry is < 100 bytes


def test_none_logs_nothing_and_says_so(cli: Cli, test_image: str, names: list[str]) -> None:
    name = "logdrv-none"
    names.append(name)
    started = cli(
        "run",
        "-d",
        "--log-driver",
        "none",
        "--name",
        name,
        test_image,
        "sh",
        "-c",
        "echo hi; sleep 600",
    )
    assert started.returncode == 0, started.stderr
    shown = cli("logs", name)
    assert shown.returncode == 125
    assert shown.stderr == "ctrexec: configured logging driver does not support reading\n"
    assert not _log(cli, name).parent.exists()
    assert _drivers_writing(_log(cli, name)) == []
    attached = cli(
        "run",
        "--rm",
        "--log-driver",
        "none",
        "--name",
        f"{name}-att",
        test_image,
        "sh",
        "-c",
        "echo hi; exit 3",
    )
    assert (attached.returncode, attached.stdout) == (3, "")
