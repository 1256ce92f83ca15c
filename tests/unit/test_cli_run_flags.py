"""``run``/``create`` flags into a TaskConfig, read the way docker reads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctrexec.cli.main import build_parser, main
from ctrexec.cli.tasks import _config
from ctrexec.oci import resolve_args
from ctrexec.tasks.config import TaskConfig

pytestmark = pytest.mark.unit


def _parse(*argv: str) -> TaskConfig:
    return _config(build_parser().parse_args(["run", "--name", "t", *argv]))


def test_empty_entrypoint_clears_it_and_runs_the_command() -> None:
    cfg = _parse("--entrypoint", "", "img", "echo", "hi")
    assert cfg.entrypoint == ()
    assert resolve_args(["/entry"], ["serve"], cfg.entrypoint, cfg.command) == ["echo", "hi"]


def test_entrypoint_is_one_executable_not_split() -> None:
    # docker: --entrypoint "/bin/sh -c" names one file, it is not a word list.
    assert _parse("--entrypoint", "/bin/sh -c", "img").entrypoint == ("/bin/sh -c",)


def test_no_entrypoint_flag_keeps_the_image_s() -> None:
    cfg = _parse("img")
    assert cfg.entrypoint is None and cfg.command is None
    assert resolve_args(["/entry"], ["serve"], cfg.entrypoint, cfg.command) == ["/entry", "serve"]


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--cpus", "5000"], "invalid value 5000.0 for --cpus: CPU count must be between"),
        (["--cpus", "-1"], "for --cpus: CPU count must be between"),
        (["--pids-limit", "0"], "invalid value 0 for --pids-limit"),
        (["--cpu-shares", "1"], "for --cpu-shares: CPU shares must be between 2 and 262144"),
        (["--oom-score-adj", "2000"], "for --oom-score-adj"),
        (["-m", "1k"], "invalid value '1k' for --memory"),
        (["--cap-add", "NOPE"], "invalid --cap-add: unknown capability 'NOPE'"),
        (["-l", "io.ctrexec.managed=x"], "invalid --label: label 'io.ctrexec.managed' is reserved"),
        (["--sysctl", "kernel.x=1"], "invalid --sysctl"),
        (["--name", "a/b"], "invalid value 'a/b' for --name"),
        (["--stop-timeout", "-1"], "for --stop-timeout: must not be negative"),
        (["-u", "1:"], "for --user"),
        (["-w", "rel"], "for --workdir"),
        (["--hostname=a_b"], "for --hostname"),
    ],
)
def test_bad_run_flags_are_one_line_naming_the_flag(
    flags: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The socket does not exist: the flags must be refused before any connection.
    argv = ["run", "--address", str(tmp_path / "none.sock"), *flags, "img", "true"]
    assert main(argv) == 125
    line = _one_line_error(capsys)
    assert line.startswith("ctrexec: ") and expected in line, line


def test_group_up_with_a_bad_file_is_one_line_and_125(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "g.toml"
    f.write_text('name = "g"\n[[task]]\nname = "web"\nimage = "img"\ncpus = "2"\n')
    assert main(["group", "up", "--address", str(tmp_path / "none.sock"), str(f)]) == 125
    line = _one_line_error(capsys)
    assert line == f"ctrexec: group file {f}: task web: cpus = '2': expected a number"


def test_a_prefix_of_a_long_flag_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """docker refuses ``--mem`` for ``--memory``; so does every ctrexec parser."""
    assert main(["run", "--mem", "1m", "img"]) == 125
    assert "unrecognized arguments: --mem" in capsys.readouterr().err
    assert _parse("--memory", "8m", "img").memory == "8m"
