"""``run``/``create`` flags into a TaskConfig, read the way docker reads them."""

from __future__ import annotations

import pytest

from ctrexec.cli.main import build_parser
from ctrexec.cli.tasks import _config
from ctrexec.oci import resolve_args
from ctrexec.taskconfig import TaskConfig

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
