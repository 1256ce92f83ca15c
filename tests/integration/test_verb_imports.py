"""Each verb loads only what it uses: its set of modules, kept in tests/data/verb-imports.json.

Every verb runs for real against the session's containerd, each in a fresh interpreter
(the probe of tests/_imports.py), and the ctrexec modules plus the heavy third-party
packages it loaded are compared with the file. A change that makes a verb load more
(or less) shows up as a diff to review, not as a slower command nobody times; after an
intended change, ``scripts/verb-imports`` writes the file again.

What the file must hold is what each verb needs, and no more:

- ``ps``, ``inspect`` and ``logs`` read records and task states (the Containers and
  Tasks services, ``tasks.info``) and print them: no Executor, nothing of ``net/``
  and no pyroute2 for tasks outside a group (a group member's pin check loads
  ``net.grouppin``; a live task's ``inspect`` looks into its namespace through
  netlink), no urllib3 (that is the registry's).
- ``version`` asks containerd's Version service: grpc, ``_rpc``, the client and that
  one stub; no task values, no images, no registry.
- ``images`` reads the image store and who uses each image: no Tasks stub, no netlink.
- ``run``, ``exec``, ``stop`` and ``rm`` drive tasks through the Executor, which
  composes everything a task's life can need; ``netns ls`` reads /run/netns and /proc
  (no grpc); ``pull`` is the one verb with urllib3 (here refused by a closed port,
  after loading what a pull loads before the first request): a ``run`` whose image is
  there already loads no HTTP client.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import CLI_PROG, Cli
from _imports import probe

pytestmark = pytest.mark.integration

EXPECTED = Path(__file__).resolve().parent.parent / "data" / "verb-imports.json"
#: ``scripts/verb-imports`` sets it: write the file from this run instead of comparing.
WRITE_ENV = "CTREXEC_WRITE_VERB_IMPORTS"
#: Third-party packages whose loading matters, kept as one name each.
HEAVY = ("grpc", "google.protobuf", "pyroute2", "urllib3", "attr", "attrs")
UP, DONE = "vi-up", "vi-done"
#: A registry nobody serves (port 1 on loopback is closed): ``pull`` fails at connect.
NO_REGISTRY = "127.0.0.1:1/ctrexec-none:latest"


def _kept(loaded: list[str]) -> list[str]:
    """The watched modules, each heavy package as its name, and of the generated
    ``_api`` package only the message modules (its ``__init__`` files say nothing)."""
    kept = set()
    for name in loaded:
        heavy = next((h for h in HEAVY if name == h or name.startswith(h + ".")), None)
        if heavy is not None:
            kept.add(heavy)
        elif not name.startswith("ctrexec._api.") or name.endswith("_pb2"):
            kept.add(name)
    return sorted(kept)


def _verbs(cli: Cli, image: str) -> dict[str, tuple[list[str], int]]:
    """Verb → (argv without the program, the exit code it must give), in run order."""
    calls = {
        "ps": ("ps", "-a"),
        "version": ("version",),
        "inspect": ("inspect", DONE),
        "logs": ("logs", DONE),
        "images": ("images",),
        "info": ("info",),
        "group ps": ("group ps", "vi-no-such-group"),
        "run": ("run", "--rm", image, "true"),
        "exec": ("exec", UP, "true"),
        "stop": ("stop", "-t", "0", UP),
        "rm": ("rm", UP),
        "pull": ("pull", NO_REGISTRY),
    }
    codes = {"pull": 1}  # docker's code for a pull that fails
    verbs = {
        verb: (cli.argv(command, *args)[len(CLI_PROG) :], codes.get(verb, 0))
        for verb, (command, *args) in calls.items()
    }
    return {**verbs, "netns ls": (["netns", "ls"], 0)}  # the host's names: no containerd


@pytest.fixture
def two_tasks(cli: Cli, test_image: str) -> Iterator[None]:
    """vi-up runs (exec, stop and rm act on it); vi-done ran and exited (inspect, logs)."""
    try:
        for argv in (
            ("run", "-d", "--name", UP, test_image, "sleep", "300"),
            ("run", "--name", DONE, test_image, "echo", "done"),
        ):
            got = cli(*argv)
            assert got.returncode == 0, got.stderr
        yield
    finally:
        cli("rm", "-f", UP, DONE)


def test_each_verb_loads_only_what_it_uses(cli: Cli, test_image: str, two_tasks: None) -> None:
    got: dict[str, list[str]] = {}
    for verb, (argv, code) in _verbs(cli, test_image).items():
        (report,) = probe([argv], ("ctrexec", *HEAVY), env=dict(os.environ))
        assert report["code"] == code, (verb, report["err"])
        got[verb] = _kept(report["loaded"])
    if os.environ.get(WRITE_ENV):
        EXPECTED.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    expected = json.loads(EXPECTED.read_text())
    changed = {v: _diff(expected.get(v, []), got[v]) for v in got if expected.get(v) != got[v]}
    assert changed == {}, (
        f"verbs load other modules than {EXPECTED.name} says (+ more, - fewer); if that "
        "is intended, write it again with scripts/verb-imports and review the diff"
    )
    _never_loaded(got)


def _diff(before: list[str], now: list[str]) -> list[str]:
    return [f"+{m}" for m in sorted(set(now) - set(before))] + [
        f"-{m}" for m in sorted(set(before) - set(now))
    ]


def _never_loaded(got: dict[str, list[str]]) -> None:
    """What the reading verbs must never load, whatever the file says."""
    for verb in ("ps", "version", "inspect", "logs"):
        assert [m for m in got[verb] if m in ("pyroute2", "urllib3")] == [], verb
        assert [m for m in got[verb] if m.startswith("ctrexec.net.")] == [], verb
        assert "ctrexec.tasks.executor" not in got[verb], verb
    assert [m for m in got["version"] if m.startswith(("ctrexec.images", "ctrexec.tasks"))] == []
    assert [m for m in got["netns ls"] if m in ("grpc", "google.protobuf")] == []
    assert "urllib3" in got["pull"] and "urllib3" not in got["run"]
