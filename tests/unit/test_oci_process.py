"""Arguments (docker's ENTRYPOINT/CMD rules), environment, identity and limits."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from ctrexec.errors import InvalidArgument
from ctrexec.oci import (
    DEFAULT_PATH,
    build_spec,
    merge_env,
    resolve_args,
    with_args,
    with_cwd,
    with_env,
    with_no_new_privileges,
    with_oom_score_adj,
    with_rlimits,
    with_tty,
    with_user_ids,
)

pytestmark = pytest.mark.unit

SHELL_ENTRY = ["/bin/sh", "-c", "exec_entry p1_entry"]

# Docker's documented table ("Understand how CMD and ENTRYPOINT interact"),
# with shell forms already wrapped in /bin/sh -c as they are in image configs.
DOCKER_TABLE = [
    (None, ["exec_cmd", "p1_cmd"], ["exec_cmd", "p1_cmd"]),
    (None, ["/bin/sh", "-c", "exec_cmd p1_cmd"], ["/bin/sh", "-c", "exec_cmd p1_cmd"]),
    (["exec_entry", "p1_entry"], None, ["exec_entry", "p1_entry"]),
    (
        ["exec_entry", "p1_entry"],
        ["exec_cmd", "p1_cmd"],
        ["exec_entry", "p1_entry", "exec_cmd", "p1_cmd"],
    ),
    (
        ["exec_entry", "p1_entry"],
        ["/bin/sh", "-c", "exec_cmd p1_cmd"],
        ["exec_entry", "p1_entry", "/bin/sh", "-c", "exec_cmd p1_cmd"],
    ),
    (SHELL_ENTRY, None, SHELL_ENTRY),
    (SHELL_ENTRY, ["exec_cmd", "p1_cmd"], [*SHELL_ENTRY, "exec_cmd", "p1_cmd"]),
]  # fmt: skip


@pytest.mark.parametrize(("entrypoint", "cmd", "expected"), DOCKER_TABLE)
def test_docker_entrypoint_cmd_table(
    entrypoint: list[str] | None, cmd: list[str] | None, expected: list[str]
) -> None:
    assert resolve_args(entrypoint, cmd) == expected


@pytest.mark.parametrize(
    ("user_entrypoint", "user_cmd", "expected"),
    [
        # docker run IMAGE
        (None, None, ["/entry", "-v", "serve"]),
        (None, [], ["/entry", "-v", "serve"]),
        # docker run IMAGE other args: the user's command replaces Cmd
        (None, ["other", "args"], ["/entry", "-v", "other", "args"]),
        # docker run --entrypoint /bin/sh IMAGE: the image's Cmd is cleared
        (["/bin/sh"], None, ["/bin/sh"]),
        # docker run --entrypoint /bin/sh IMAGE -c id
        (["/bin/sh"], ["-c", "id"], ["/bin/sh", "-c", "id"]),
        # docker run --entrypoint "" IMAGE ls /: entrypoint cleared, user command runs
        ([], ["ls", "/"], ["ls", "/"]),
    ],
)
def test_user_overrides(
    user_entrypoint: list[str] | None, user_cmd: list[str] | None, expected: list[str]
) -> None:
    args = resolve_args(["/entry", "-v"], ["serve"], user_entrypoint, user_cmd)
    assert args == expected


@pytest.mark.parametrize(
    ("entrypoint", "cmd", "user_entrypoint", "user_cmd"),
    [
        (None, None, None, None),
        ([], [], None, None),
        (["/entry"], ["serve"], [], None),  # cleared entrypoint, image Cmd cleared too
        ([""], None, None, None),
    ],
)
def test_no_command_is_an_error(
    entrypoint: Sequence[str] | None,
    cmd: Sequence[str] | None,
    user_entrypoint: Sequence[str] | None,
    user_cmd: Sequence[str] | None,
) -> None:
    with pytest.raises(InvalidArgument, match="no command"):
        resolve_args(entrypoint, cmd, user_entrypoint, user_cmd)


# docker run [--entrypoint U | --entrypoint ''] IMAGE [X], for every kind of image:
# a given entrypoint (even an empty one) clears the image's Cmd too.
_NONE, _ERR = (None, None), None
IMAGES = {"none": _NONE, "cmd": (None, ["c"]), "entry": (["e"], None), "both": (["e"], ["c"])}
MATRIX = {
    #          absent/absent  absent/X       U/absent  U/X         ''/absent  ''/X
    "none":  (_ERR,           ["x"],         ["u"],    ["u", "x"], _ERR,      ["x"]),
    "cmd":   (["c"],          ["x"],         ["u"],    ["u", "x"], _ERR,      ["x"]),
    "entry": (["e"],          ["e", "x"],    ["u"],    ["u", "x"], _ERR,      ["x"]),
    "both":  (["e", "c"],     ["e", "x"],    ["u"],    ["u", "x"], _ERR,      ["x"]),
}  # fmt: skip
OVERRIDES = [(None, None), (None, ["x"]), (["u"], None), (["u"], ["x"]), ([], None), ([], ["x"])]


@pytest.mark.parametrize("empty", [[], [""]], ids=["empty-list", "one-empty-string"])
@pytest.mark.parametrize("image", sorted(IMAGES))
@pytest.mark.parametrize("case", range(len(OVERRIDES)))
def test_entrypoint_cmd_matrix(image: str, case: int, empty: list[str]) -> None:
    entry, cmd = IMAGES[image]
    user_entry, user_cmd = OVERRIDES[case]
    if user_entry == []:
        user_entry = empty  # docker's API carries --entrypoint '' as [""]
    expected = MATRIX[image][case]
    if expected is None:
        with pytest.raises(InvalidArgument, match=r"^no command specified$"):
            resolve_args(entry, cmd, user_entry, user_cmd)
    else:
        assert resolve_args(entry, cmd, user_entry, user_cmd) == expected


def test_resolve_args_rejects_bad_types() -> None:
    with pytest.raises(InvalidArgument):
        resolve_args("sh -c id", None)  # a str is a Sequence[str]; refused anyway
    with pytest.raises(InvalidArgument):
        resolve_args(["sh", 1], None)  # type: ignore[list-item]
    with pytest.raises(InvalidArgument):
        resolve_args(["sh\x00"], None)


def test_with_args() -> None:
    assert build_spec(with_args(["echo", "hi"]))["process"]["args"] == ["echo", "hi"]
    for bad in ([], [""], "echo hi"):
        with pytest.raises(InvalidArgument):
            with_args(bad)


def test_merge_env_user_wins_and_order_is_kept() -> None:
    image = ["PATH=/image/bin", "LANG=C", "HOME=/root"]
    user = ["HOME=/home/app", "EXTRA=1"]
    assert merge_env(image, user) == ["PATH=/image/bin", "LANG=C", "HOME=/home/app", "EXTRA=1"]


def test_merge_env_adds_default_path() -> None:
    assert merge_env(["A=1"], {"B": "2"}) == ["A=1", "B=2", f"PATH={DEFAULT_PATH}"]


def test_merge_env_keeps_values_with_equals_and_empty_values() -> None:
    assert merge_env(["OPTS=a=b"], ["EMPTY="]) == ["OPTS=a=b", "EMPTY=", f"PATH={DEFAULT_PATH}"]


@pytest.mark.parametrize("bad", [["NOVALUE"], ["=x"], ["A=\x00"], "A=1"])
def test_env_rejects_malformed(bad: object) -> None:
    with pytest.raises(InvalidArgument):
        with_env(bad)  # type: ignore[arg-type]


def test_with_env_image_then_user() -> None:
    spec = build_spec(
        with_env(["PATH=/app/bin:/bin", "MODE=image", "KEEP=1"]),
        with_env({"MODE": "user", "NEW": "x"}),
    )
    assert spec["process"]["env"] == ["PATH=/app/bin:/bin", "MODE=user", "KEEP=1", "NEW=x"]


def test_with_env_keeps_default_path_when_image_has_none() -> None:
    spec = build_spec(with_env(["A=1"]))
    assert spec["process"]["env"] == [f"PATH={DEFAULT_PATH}", "A=1"]


def test_with_cwd() -> None:
    assert build_spec(with_cwd("/srv/app/"))["process"]["cwd"] == "/srv/app"
    for bad in ("relative", "/srv/../etc", ""):
        with pytest.raises(InvalidArgument):
            with_cwd(bad)


def test_with_tty() -> None:
    assert build_spec(with_tty())["process"]["terminal"] is True
    assert build_spec(with_tty(), with_tty(False))["process"]["terminal"] is False


def test_with_rlimits_replaces_same_type() -> None:
    spec = build_spec(with_rlimits({"nofile": (4096, 8192), "RLIMIT_NPROC": (100, 100)}))
    assert spec["process"]["rlimits"] == [
        {"type": "RLIMIT_NOFILE", "soft": 4096, "hard": 8192},
        {"type": "RLIMIT_NPROC", "soft": 100, "hard": 100},
    ]


@pytest.mark.parametrize(
    "bad",
    [{"nofile": (10, 5)}, {"bogus": (1, 1)}, {"nofile": (-1, 1)}, {"nofile": 5}, {"core": (1,)}],
)
def test_with_rlimits_rejects(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidArgument):
        with_rlimits(bad)  # type: ignore[arg-type]


def test_with_no_new_privileges() -> None:
    assert build_spec(with_no_new_privileges(False))["process"]["noNewPrivileges"] is False
    spec = build_spec(with_no_new_privileges(False), with_no_new_privileges())
    assert spec["process"]["noNewPrivileges"] is True


@pytest.mark.parametrize("score", [-1000, 0, 1000])
def test_with_oom_score_adj(score: int) -> None:
    assert build_spec(with_oom_score_adj(score))["process"]["oomScoreAdj"] == score


@pytest.mark.parametrize("score", [-1001, 1001, True, 1.5])
def test_with_oom_score_adj_rejects(score: object) -> None:
    with pytest.raises(InvalidArgument):
        with_oom_score_adj(score)  # type: ignore[arg-type]


def test_with_user_ids() -> None:
    spec = build_spec(with_user_ids(1000, 1001, [20, 30, 20]))
    assert spec["process"]["user"] == {"uid": 1000, "gid": 1001, "additionalGids": [20, 30]}
    assert build_spec(with_user_ids(5, 5))["process"]["user"] == {"uid": 5, "gid": 5}


@pytest.mark.parametrize(("uid", "gid"), [(-1, 0), (0, -1), (2**31, 0), ("0", 0)])
def test_with_user_ids_rejects(uid: object, gid: object) -> None:
    with pytest.raises(InvalidArgument):
        with_user_ids(uid, gid)  # type: ignore[arg-type]
