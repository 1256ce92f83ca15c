"""docker's ``commit --change`` lines applied to an image config (no daemon)."""

from __future__ import annotations

import pytest

from ctrexec import errors
from ctrexec.images.commit import apply_changes


def test_exec_and_shell_forms_of_cmd_and_entrypoint() -> None:
    out = apply_changes(
        {"Cmd": ["sh"], "Entrypoint": None},
        ['CMD ["cat", "/data.txt"]', "ENTRYPOINT echo hi there", "cmd [not json"],
    )
    assert out["Entrypoint"] == ["/bin/sh", "-c", "echo hi there"]
    assert out["Cmd"] == ["/bin/sh", "-c", "[not json"]  # the last CMD wins


def test_env_adds_and_replaces_by_name_in_both_forms() -> None:
    base = {"Env": ["PATH=/bin", "A=1"]}
    out = apply_changes(base, ["ENV A=2 B='two words'", "ENV C three words"])
    assert out["Env"] == ["PATH=/bin", "A=2", "B=two words", "C=three words"]
    assert base == {"Env": ["PATH=/bin", "A=1"]}  # the input is not changed


def test_workdir_and_user() -> None:
    assert apply_changes({}, ["WORKDIR /srv", "USER 1000:1000"]) == {
        "WorkingDir": "/srv",
        "User": "1000:1000",
    }


@pytest.mark.parametrize("line", ["EXPOSE 80", "CMD", "LABEL a=b", ""])
def test_other_instructions_are_refused(line: str) -> None:
    with pytest.raises(errors.InvalidArgument, match="use one of CMD"):
        apply_changes({}, [line])
