"""The parser the command server builds ahead for its children (cli.main.build_parser_ahead):
taken only for the environment it was built in, once, and the same as one built then."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ctrexec.cli import main as cli_main
from ctrexec.cli._common import ArgumentParser

VERBS = ("ps", "run", "logs", "netns", "inspect")


@pytest.fixture(autouse=True)
def _nothing_ahead() -> Iterator[None]:
    cli_main._ahead.clear()
    yield
    cli_main._ahead.clear()


def _help(parser: ArgumentParser, verb: str | None) -> str:
    if verb is None:
        return parser.format_help()
    assert parser._subparsers is not None
    for action in parser._subparsers._group_actions:
        choices = getattr(action, "choices", None) or {}
        if verb in choices:
            return str(choices[verb].format_help())
    raise AssertionError(f"no verb {verb}")


def test_taken_once_in_the_same_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTREXEC_NAMESPACE", "ahead")
    cli_main.build_parser_ahead()
    (built,) = cli_main._ahead.values()
    taken: list[object] = []
    parse_args = built.parse_args

    def counted(words: list[str]) -> object:
        taken.append(words)
        return parse_args(words)

    monkeypatch.setattr(built, "parse_args", counted)
    args = cli_main.parse(["ps", "-a"])
    assert len(taken) == 1
    assert args.command == "ps" and args.all
    assert cli_main._ahead == {}  # taken: a second parse builds its own
    assert cli_main.parse(["-n", "x", "logs", "web"]).namespace == "x"


@pytest.mark.parametrize(
    ("name", "value"),
    [("CTREXEC_NAMESPACE", "other"), ("CONTAINERD_ADDRESS", "/x.sock"), ("LANG", "de_DE")],
)
def test_another_environment_builds_its_own(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    """The help text shows the defaults from the environment: a parser built for one
    environment would tell another command's user the wrong defaults."""
    monkeypatch.setenv("CTREXEC_NAMESPACE", "ahead")
    cli_main.build_parser_ahead()
    (built,) = cli_main._ahead.values()
    monkeypatch.setenv(name, value)
    taken: list[object] = []
    monkeypatch.setattr(built, "parse_args", lambda *a: taken.append(a))
    assert cli_main.parse(["ps", "-a"]).all  # parsed by a parser built for this call
    assert taken == []
    assert cli_main._ahead == {}  # and the other environment's parser is dropped


def test_ahead_reads_as_one_built_then(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTREXEC_SUBNET", "10.231.7.0/24")
    cli_main.build_parser_ahead()
    (ahead,) = cli_main._ahead.values()
    for verb in (None, *VERBS):
        fresh = cli_main.build_parser(only=() if verb is None else (verb,))
        assert _help(ahead, verb) == _help(fresh, verb)
