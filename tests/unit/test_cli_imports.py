"""The CLI loads only what a command uses: checked by which modules load, not by time.

Each check runs in a fresh interpreter (tests/_imports.py, the probe this shares with
tests/integration/test_verb_imports.py, which keeps each verb's import set).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _imports import probe

from ctrexec.cli.main import build_parser

#: What parsing and ``--help`` must never load: the gRPC seam, protobuf, the stubs,
#: netlink, and attrs (the library's value types).
HEAVY = ("grpc", "google.protobuf", "pyroute2", "ctrexec._api", "ctrexec._rpc", "attr", "attrs")


def _probe(argvs: list[list[str]], env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    return probe(argvs, HEAVY, env=env)


def _command_paths(parser: argparse.ArgumentParser, prefix: list[str]) -> list[list[str]]:
    """Every command and subcommand of the parser, as argv prefixes."""
    paths = [prefix]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                paths += _command_paths(sub, [*prefix, name])
    return paths


def test_every_help_loads_nothing_heavy() -> None:
    paths = _command_paths(build_parser(), [])
    assert ["run"] in paths and ["netns", "ls"] in paths and ["group", "up"] in paths
    report = _probe([[*p, "--help"] for p in paths])
    assert [r["argv"] for r in report if r["code"] != 0] == []
    assert all(r["out"].startswith("usage: ctrexec") for r in report)
    assert [(r["argv"], r["loaded"]) for r in report if r["loaded"]] == []


def test_bad_flags_fail_before_loading_the_library() -> None:
    report = _probe(
        [["run", "--cpus", "lots", "img"], ["version", "--bogus"], ["--address", "x", "sp"]]
    )
    assert [r["code"] for r in report] == [125, 125, 1]  # docker's 1 for an unknown verb
    assert [len(r["err"].strip().splitlines()) for r in report] == [1, 1, 2]
    assert report[-1]["loaded"] == []


def test_netns_ls_needs_no_grpc_or_netlink() -> None:
    (got,) = _probe([["netns", "ls", "--json"]])
    assert got["code"] == 0, got["err"]
    assert isinstance(json.loads(got["out"]), list)
    assert [m for m in got["loaded"] if not m.startswith("attr")] == []


def test_version_without_daemon_loads_no_netlink(tmp_path: Path) -> None:
    """``version`` needs grpc to ask the server, never pyroute2; no daemon: one line, 125."""
    env = dict(os.environ, CONTAINERD_ADDRESS=str(tmp_path / "none.sock"))
    (got,) = _probe([["version"]], env=env)
    assert got["code"] == 125
    assert str(tmp_path / "none.sock") in got["err"]
    assert [m for m in got["loaded"] if m.startswith("pyroute2")] == []


@pytest.mark.parametrize("name", ["Executor", "TaskConfig", "Client", "NetNS", "Stats"])
def test_public_names_load_on_first_use(name: str) -> None:
    code = (
        "import sys, ctrexec; before = 'grpc' in sys.modules or 'attrs' in sys.modules; "
        f"value = getattr(ctrexec, {name!r}); "
        "print(before, value.__name__, value is getattr(ctrexec, value.__name__), "
        f"{name!r} in dir(ctrexec))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", name, "True", "True"]


class _FakeClient:
    address = "/fake.sock"
    server_version = None  # what connect() saw; None makes the command ask

    def __enter__(self) -> _FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def version(self) -> Any:
        return argparse.Namespace(version="1.6.20", revision="abc")


def test_version_reports_the_packaged_version(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The client version is ctrexec._version.VERSION, the one pyproject packages."""
    from importlib.metadata import version

    from ctrexec.cli import info

    monkeypatch.setattr(info, "connect", lambda args: _FakeClient())
    assert info.cmd_version(build_parser().parse_args(["version", "--json"])) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["client"] == {"version": version("ctrexec")}
    assert out["server"]["version"] == "1.6.20"


def _help_of(parser: argparse.ArgumentParser) -> str:
    return parser.format_help()


def test_a_command_line_builds_its_verb_s_parser_alone() -> None:
    """The verb list and help read the same whichever verbs are built; a command line
    builds the one it names (the flags before it skipped), all when it names none."""
    from ctrexec.cli import main as climain

    assert _help_of(climain.build_parser(only=())) == _help_of(build_parser())
    assert climain.verb_of(["-H", "x", "--namespace=y", "-n", "z", "ps", "-a"]) == "ps"
    assert climain.verb_of(["--help"]) is None
    built = climain.build_parser(only=("ps",))
    (verbs,) = [a for a in built._actions if isinstance(a, argparse._SubParsersAction)]
    assert isinstance(verbs.choices["ps"], argparse.ArgumentParser)
    assert not isinstance(verbs.choices["run"], argparse.ArgumentParser)
    args = climain.parse(["-n", "before", "ps", "-a", "-N", "after"])
    assert (args.command, args.all, args.namespace) == ("ps", True, "after")


def test_a_wrong_guess_of_the_verb_builds_them_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """Should the guess miss (a flag before the verb that takes a value, added to
    ``global_flags`` but not to the guess), the verb's parser is built after all."""
    from ctrexec.cli import _common
    from ctrexec.cli import main as climain

    with pytest.raises(_common.NotBuilt):
        climain.build_parser(only=("ps",)).parse_args(["images"])
    monkeypatch.setattr(climain, "verb_of", lambda _argv: "ps")
    args = climain.parse(["images", "-q"])
    assert (args.command, args.quiet) == ("images", True)
