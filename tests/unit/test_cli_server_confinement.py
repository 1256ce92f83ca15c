"""Which callers the command server refuses for their confinement, and which verbs the
client never hands over (both pure: parsed /proc text and argv, no server)."""

from __future__ import annotations

import os

import pytest

from ctrexec.cli import client, main, server


def _status(**changes: str) -> dict[str, str]:
    base = {key: "0" for key in server.CONFINEMENT_STATUS}
    base.update(CapEff="000001ffffffffff", CapBnd="000001ffffffffff", Uid="0 0 0 0")
    base.update({"attr/current": "<EINVAL>", "cgroup": "0::/user.slice\n", "limits": "x"})
    base.update(changes)
    return base


def test_the_same_confinement_is_accepted() -> None:
    assert server.confinement_differences(_status(), _status()) == []


@pytest.mark.parametrize(
    "changes",
    [
        {"CapEff": "000001fffeffffff"},  # CAP_NET_ADMIN... one effective cap fewer
        {"CapBnd": "000001ffffffefff"},  # setpriv --bounding-set -...
        {"CapAmb": "0000000000000400"},
        {"NoNewPrivs": "1"},  # setpriv --no-new-privs
        {"Groups": "4 24"},  # other supplementary groups
        {"attr/current": "unconfined_u:unconfined_r:container_t:s0\n"},
        {"cgroup": "0::/system.slice/other.service\n"},
        {"limits": "y"},  # ulimit
        {"Cpus_allowed": "1"},  # taskset
    ],
    ids=lambda c: next(iter(c)),
)
def test_any_difference_is_refused(changes: dict[str, str]) -> None:
    assert server.confinement_differences(_status(**changes), _status()) == [*changes]
    assert server.confinement_differences(_status(), _status(**changes)) == [*changes]


def test_a_seccomp_filter_is_refused_even_when_the_server_has_one() -> None:
    """Filters show as a count, not as what they allow: two callers with one filter
    each may allow different calls, so a filtered caller always runs it itself."""
    filtered = _status(Seccomp="2", Seccomp_filters="1")
    assert server.confinement_differences(filtered, filtered) == ["Seccomp"]
    assert server.confinement_differences(_status(Seccomp="2"), _status()) == ["Seccomp"]


def test_an_unread_status_is_refused() -> None:
    assert server.confinement_differences(None, _status()) == ["status"]
    assert server.confinement_differences(_status(), None) == ["status"]


def test_this_process_reads_as_itself() -> None:
    own = server.confinement("self")
    assert own is not None
    assert server.confinement(os.getpid()) == own
    assert set(server.CONFINEMENT_STATUS) - {"Seccomp_filters"} <= set(own)
    assert server.confinement_differences(own, own) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["supervise"],
        ["supervise", "--namespace", "ctrexec"],
        ["--namespace", "x", "supervise"],
        ["-H", "/run/c.sock", "events", "--filter", "event=exit"],
        ["attach", "web"],
        ["logs", "-f", "web"],
        ["logs", "--follow", "web"],
        ["logs", "-tf", "web"],
        ["logs", "-n", "3", "-f", "web"],
        ["stats"],
        ["stats", "web"],
        ["-n", "stats", "events"],  # a namespace named "stats": the verb is events
    ],
)
def test_long_running_verbs_run_in_the_client(argv: list[str]) -> None:
    assert client.runs_in_process(argv)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--help"],
        ["ps"],
        ["logs", "web"],
        ["logs", "-n", "3", "web"],
        ["stats", "--no-stream"],
        ["run", "--rm", "img", "logs", "-f"],  # the task's command, not ctrexec's
        ["-n", "supervise", "ps"],  # a namespace named "supervise": the verb is ps
        ["exec", "web", "stats"],
    ],
)
def test_other_commands_go_to_the_server(argv: list[str]) -> None:
    assert not client.runs_in_process(argv)


def test_the_client_knows_the_valued_global_flags() -> None:
    """The client can't import the parser (its start-up budget); this keeps its copy
    of what takes a value before the verb the parser's."""
    assert client.VALUED_GLOBALS == main._VALUED_GLOBALS
    parser = main.build_parser(only=())
    valued = {
        flag
        for action in parser._actions
        if action.option_strings and action.nargs is None and action.dest != "help"
        for flag in action.option_strings
    }
    assert valued == client.VALUED_GLOBALS
