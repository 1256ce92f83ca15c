"""docker's --env-file format, read by the one parser the CLI and group files share."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctrexec.errors import InvalidArgument
from ctrexec.groups.spec import load_group_file
from ctrexec.tasks.envfile import parse_env_text, read_env_files


def test_lines_as_docker_reads_them() -> None:
    text = (
        "\ufeff# a comment\n"
        "\n"
        "   # an indented comment\n"
        "A=1\n"
        "  B=two words  \n"
        'QUOTED="kept"\n'
        "DOLLAR=$HOME\n"
        "EMPTY=\n"
        "EQ=a=b\n"
        "FROM_CALLER\n"
        "NOT_SET\n"
    )
    env = parse_env_text(text, {"FROM_CALLER": "yes"})
    assert env == {
        "A": "1",
        "B": "two words  ",
        "QUOTED": '"kept"',
        "DOLLAR": "$HOME",
        "EMPTY": "",
        "EQ": "a=b",
        "FROM_CALLER": "yes",
    }


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("A B=1", "poorly formatted environment: variable 'A B' contains whitespaces"),
        ("=1", "poorly formatted environment: no variable name on line '=1'"),
    ],
)
def test_bad_keys_are_refused(line: str, message: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        parse_env_text(line + "\n", {})
    assert str(info.value) == message


def test_files_in_order_later_wins_relative_to_base(tmp_path: Path) -> None:
    (tmp_path / "one").write_text("A=1\nB=1\n")
    (tmp_path / "two").write_text("B=2\n")
    assert read_env_files(["one", tmp_path / "two"], {}, base=tmp_path) == {"A": "1", "B": "2"}


def test_missing_directory_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"^open nope: no such file or directory$"):
        read_env_files(["nope"], {}, base=tmp_path)
    with pytest.raises(InvalidArgument, match="is a directory"):
        read_env_files([tmp_path], {})
    (tmp_path / "bin").write_bytes(b"A=1\nB=\xff\n")
    with pytest.raises(InvalidArgument, match=r"contains invalid utf8 bytes at line 2$"):
        read_env_files(["bin"], {}, base=tmp_path)


def _group(tmp_path: Path, task_lines: str) -> Path:
    path = tmp_path / "g.toml"
    path.write_text(f'name = "g"\n[[task]]\nname = "a"\nimage = "busybox"\n{task_lines}\n')
    return path


def test_group_file_env_file_under_own_env(tmp_path: Path) -> None:
    (tmp_path / "web.env").write_text("A=from-file\nB=from-file\n")
    spec = load_group_file(_group(tmp_path, 'env_file = "web.env"\nenv = { B = "own" }'))
    (config,) = spec.task_configs()
    assert dict(config.env) == {"A": "from-file", "B": "own"}
    listed = load_group_file(_group(tmp_path, 'env_file = ["web.env"]'))
    assert dict(listed.task_configs()[0].env) == {"A": "from-file", "B": "from-file"}


def test_group_file_env_file_errors_name_task_and_key(tmp_path: Path) -> None:
    path = _group(tmp_path, 'env_file = "gone.env"')
    with pytest.raises(InvalidArgument) as info:
        load_group_file(path)
    assert str(info.value) == (
        f"group file {path}: task a: env_file = 'gone.env': "
        "open gone.env: no such file or directory"
    )
    with pytest.raises(InvalidArgument, match="expected a path or a list of paths"):
        load_group_file(_group(tmp_path, "env_file = 3"))


def test_public_name_takes_str_and_path_alike(tmp_path: Path) -> None:
    import ctrexec

    (tmp_path / "a.env").write_text("A=1\nHOME\n")
    (tmp_path / "b.env").write_text("A=2\n")
    env = ctrexec.read_env_files([tmp_path / "a.env", "b.env"], {"HOME": "/h"}, base=str(tmp_path))
    assert env == {"A": "2", "HOME": "/h"}
