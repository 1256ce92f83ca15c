"""--init: tini's argv in front of the task's, its binary found on the host or refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctrexec.errors import InvalidArgument, InvalidField
from ctrexec.oci import build_spec, process
from ctrexec.tasks import spec as taskspec
from ctrexec.tasks.config import TaskConfig


def test_with_init_wraps_the_args_set_before() -> None:
    spec = build_spec(process.with_args(["-x", "y"]), process.with_init())
    assert spec["process"]["args"] == [process.INIT_PATH, "--", "-x", "y"]
    assert process.without_init(spec["process"]["args"]) == ["-x", "y"]
    assert process.without_init(["sh", "--", "x"]) == ["sh", "--", "x"]


def test_find_init_takes_the_first_executable(tmp_path: Path) -> None:
    plain, tool = tmp_path / "plain", tmp_path / "tool"
    plain.write_text("")
    tool.write_text("")
    tool.chmod(0o755)
    found = taskspec.find_init([str(tmp_path / "gone"), str(plain), str(tool)])
    assert found == str(tool)
    with pytest.raises(InvalidArgument) as info:
        taskspec.find_init([str(tmp_path / "gone")])
    assert str(info.value) == (
        f"no init binary on this host (looked for {tmp_path}/gone); "
        "install Debian's tini: apt-get install tini"
    )


def test_check_config_names_init_when_tini_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(taskspec.defaults, "INIT_BINARIES", ("/nonexistent/tini",))
    with pytest.raises(InvalidField) as info:
        taskspec.check_config(TaskConfig(name="t", image="img", init=True))
    assert info.value.field == "init"
    assert "apt-get install tini" in str(info.value)
    assert taskspec.check_config(TaskConfig(name="t", image="img")).init_binary is None
