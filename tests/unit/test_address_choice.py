"""Which containerd a connection uses, and why (issue 39): the rule the CLI follows and
``ctrexec info`` prints, resolved by the library so a front end only shows it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ctrexec import ADDRESS_ENV, AddressChoice, Client
from ctrexec.containerd import client as client_module
from ctrexec.defaults import EMBEDDED_DIR_ENV


@pytest.fixture
def no_system(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No $CONTAINERD_ADDRESS, no system socket, the embedded daemon's dir under tmp."""
    monkeypatch.delenv(ADDRESS_ENV, raising=False)
    monkeypatch.setattr(client_module, "DEFAULT_ADDRESS", str(tmp_path / "system.sock"))
    monkeypatch.setenv(EMBEDDED_DIR_ENV, str(tmp_path / "embedded"))
    return tmp_path


def test_an_address_given_wins_over_everything(
    no_system: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ADDRESS_ENV, "/env.sock")
    choice = AddressChoice.resolve("unix:///given.sock")
    assert (choice.address, choice.source) == ("/given.sock", "argument")
    assert "--address" in choice.reason


def test_the_variable_comes_next(no_system: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ADDRESS_ENV, "/env.sock")
    choice = AddressChoice.resolve()
    assert (choice.address, choice.source) == ("/env.sock", "environment")
    assert f"${ADDRESS_ENV}" in choice.reason


def test_the_system_socket_only_when_it_exists(no_system: Path) -> None:
    system = no_system / "system.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(system))
        choice = AddressChoice.resolve()
    assert (choice.address, choice.source) == (str(system), "system")
    assert str(system) in choice.reason and "exists" in choice.reason


def test_else_the_embedded_daemon(no_system: Path) -> None:
    choice = AddressChoice.resolve()
    assert choice.source == "embedded"
    assert choice.address == str(no_system / "embedded" / "state" / "containerd.sock")
    assert "embedded, started by ctrexec" in choice.reason
    assert str(no_system / "system.sock") in choice.reason


def test_connect_never_picks_the_embedded_daemon(no_system: Path) -> None:
    """A library's connect starts no daemon: with nothing set it tries the system socket,
    and its error names that socket."""
    with pytest.raises(Exception, match=r"system\.sock does not exist"):
        Client.connect()


class _Conn:
    address = "/x.sock"

    def close(self) -> None:
        pass


def test_a_client_keeps_its_choice_in_every_namespace() -> None:
    choice = AddressChoice("/x.sock", "embedded", "embedded, started by ctrexec: test")
    client = Client(_Conn(), namespace="a", address_choice=choice)  # type: ignore[arg-type]
    assert client.with_namespace("b").address_choice is choice
    bare = Client(_Conn(), namespace="a")  # type: ignore[arg-type]
    assert (bare.address_choice.address, bare.address_choice.source) == ("/x.sock", "argument")
