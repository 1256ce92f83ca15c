"""What every command shares: connection flags, output, and the exit-code contract.

Exit codes follow docker's: 125 when ctrexec itself fails (bad flags included), 126
when the command cannot be executed, 127 when it is not found, else the task's own.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import re
import select
import signal
import sys
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, cast

from ctrexec import (
    ADDRESS_ENV,
    DEFAULT_ADDRESS,
    DEFAULT_LOG_DIR,
    DEFAULT_NAMESPACE,
    NAMESPACE_ENV,
    ConnectError,
    CtrexecError,
    InvalidArgument,
    UnknownCommand,
)

if TYPE_CHECKING:
    from ctrexec import Client, ContainerLookup, Executor

EXIT_ERROR = 125

Handler = Callable[[argparse.Namespace], int]


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports bad flags as one line and exit 125, like docker.

    Prefixes of long flags are refused, as docker refuses them: ``--mem`` is not
    ``--memory``, and a flag added later cannot change what an old script meant.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        where = self.prog.removeprefix("ctrexec").strip()
        raise InvalidArgument(f"{where}: {message}" if where else message)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """A mistyped verb as docker reports it, with the closest verbs instead of
        argparse's list of all of them; every other bad choice is argparse's."""
        if isinstance(action, argparse._SubParsersAction) and value not in action.choices:
            raise unknown_command(self.prog, str(value), list(action.choices))
        super()._check_value(action, value)


def look_up_messages_once() -> None:
    """Have argparse translate its messages through one catalogue looked up now.

    argparse asks gettext for each message as it builds a parser, and gettext searches
    the locale directories at every ask when there is no catalogue (it keeps only what
    it finds), as there is none for argparse's messages: some seventy searches, 2 ms
    of each command. Looked up once per parser build, for this command's environment,
    the messages are the ones gettext gives.
    """
    import gettext

    domain = gettext.textdomain()
    catalogue = gettext.translation(domain, gettext.bindtextdomain(domain), fallback=True)
    setattr(argparse, "_", catalogue.gettext)  # noqa: B010 (a private module global)
    setattr(argparse, "ngettext", catalogue.ngettext)  # noqa: B010


if TYPE_CHECKING:
    _SubParsers = argparse._SubParsersAction[ArgumentParser]
else:  # not subscriptable at run time
    _SubParsers = argparse._SubParsersAction


class VerbParsers(_SubParsers):
    """The verbs' parsers, built only for the verbs in ``only`` (None: every one).

    Building all of them (about a hundred parsers and their flags) costs more than
    importing the CLI, and a command line uses one. A verb left out is registered by
    its name, aliases and help alone, so the verb list, ``--help`` and a mistyped
    verb's suggestions read exactly as with every parser built; parsing into one
    raises :class:`NotBuilt`, and the caller builds them all.
    """

    only: Collection[str] | None = None

    def add_parser(self, name: str, **kwargs: Any) -> ArgumentParser:
        if self.only is None or name in self.only:
            return super().add_parser(name, **kwargs)
        aliases = kwargs.get("aliases", ())
        if "help" in kwargs:  # the line of the verb list, as argparse makes it
            self._choices_actions.append(self._ChoicesPseudoAction(name, aliases, kwargs["help"]))
        unbuilt = cast(ArgumentParser, _Unbuilt())
        for word in (name, *aliases):
            self._name_parser_map[word] = unbuilt
        return unbuilt


class NotBuilt(Exception):
    """A command line reached a verb whose parser :class:`VerbParsers` left out."""


class _Unbuilt:
    """A left-out verb's parser: takes every call of a ``register`` and does nothing."""

    def __getattr__(self, _name: str) -> Callable[..., _Unbuilt]:
        return self._ignore

    def _ignore(self, *_args: Any, **_kwargs: Any) -> _Unbuilt:
        return self

    def parse_known_args(self, *_args: Any, **_kwargs: Any) -> NoReturn:
        raise NotBuilt


def unknown_command(prog: str, word: str, verbs: Sequence[str]) -> UnknownCommand:
    """``'sp' is not a ctrexec command.`` and, below it, the closest verbs."""
    import difflib  # here, not at the top: only a mistyped verb pays for loading it

    close = difflib.get_close_matches(word, verbs, n=2, cutoff=0.5)
    quoted = " or ".join(f"'{prog} {v}'" for v in close)
    hint = f"Did you mean {quoted}? " if close else ""
    return UnknownCommand(f"'{word}' is not a {prog} command.", f"{hint}See '{prog} --help'.")


def global_flags(parser: ArgumentParser) -> None:
    """``--address`` (also docker's ``-H``/``--host``) and ``--namespace`` before the verb
    too, as ``docker -H X ps`` has them.

    Both places leave the attribute unset unless given (SUPPRESS), so a flag after the
    verb wins over one before it and neither hides the other: argparse copies the
    verb's own namespace over the top one.
    """
    parser.add_argument(
        "--address",
        "-H",
        "--host",  # docker's spelling; a unix:// prefix is taken as docker's -H takes it
        dest="address",
        default=argparse.SUPPRESS,
        help=f"containerd socket (default: {address_default()})",
    )
    parser.add_argument(
        "--namespace",
        "-n",
        default=argparse.SUPPRESS,
        help=f"containerd namespace (default: {namespace_default()})",
    )


def connection_flags(*, short_namespace: bool = True) -> ArgumentParser:
    """Flags every command that talks to containerd accepts, after the subcommand
    (and before it: :func:`global_flags`).

    The help shows the defaults in force for this call, environment included.
    ``short_namespace=False`` where docker gives ``-n`` its own meaning (``logs -n 3``
    is ``--tail 3``, ``ps -n 3`` is ``--last 3``): there the namespace is ``-N``.
    """
    return _connection_flags(short_namespace, address_default(), namespace_default())


@functools.cache
def _connection_flags(short_namespace: bool, address: str, namespace: str) -> ArgumentParser:
    """One parent parser per help text: some thirty verbs name it as a parent, each
    built or not (:class:`VerbParsers`), and argparse copies the parent's actions."""
    p = ArgumentParser(add_help=False)
    p.add_argument(
        "--address", default=argparse.SUPPRESS, help=f"containerd socket (default: {address})"
    )
    p.add_argument(
        "--namespace",
        "-n" if short_namespace else "-N",
        default=argparse.SUPPRESS,
        help=f"containerd namespace (default: {namespace})",
    )
    return p


def address_default() -> str:
    """What connect() uses when no ``--address`` is given, in words for ``--help``."""
    env = os.environ.get(ADDRESS_ENV)
    if env:
        return f"{env}, from ${ADDRESS_ENV}"
    return (
        f"${ADDRESS_ENV}, else {DEFAULT_ADDRESS} if it exists, else ctrexec's embedded containerd"
    )


def namespace_default() -> str:
    env = os.environ.get(NAMESPACE_ENV)
    return f"{env}, from ${NAMESPACE_ENV}" if env else f"{DEFAULT_NAMESPACE} (or ${NAMESPACE_ENV})"


@functools.cache
def json_flag() -> ArgumentParser:
    """One parent parser for every verb's ``--json`` (see :func:`_connection_flags`)."""
    p = ArgumentParser(add_help=False)
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def connect(args: argparse.Namespace) -> Client:
    """Connect as the flags say; with no address anywhere, use the embedded daemon.

    An explicit ``--address`` or ``$CONTAINERD_ADDRESS`` is used strictly, so a typo
    gives an error naming the socket rather than a silently started private daemon.
    Imported here, not at the top: parsing and ``--help`` load no grpc.
    """
    from ctrexec import AddressChoice, Client

    choice = AddressChoice.resolve(getattr(args, "address", None))
    namespace = getattr(args, "namespace", None)
    if choice.source in ("argument", "environment"):
        try:
            return Client.connect(choice, namespace=namespace)
        except ConnectError as exc:
            raise ConnectError(f"{exc}{_embedded_hint(choice.address)}") from None
    if choice.source == "system":
        return Client.connect(choice, namespace=namespace)
    from ctrexec import EmbeddedContainerd

    daemon = EmbeddedContainerd()
    if daemon.is_running():
        # the usual case, in one call: connect() asks containerd its version anyway
        with contextlib.suppress(ConnectError):
            return Client.connect(choice, namespace=namespace)
    else:
        print(f"ctrexec: starting embedded containerd at {daemon.address}", file=sys.stderr)
    daemon.start()  # starting it, or waiting for one just started to answer
    return Client.connect(choice, namespace=namespace)


def _embedded_hint(address: str) -> str:
    """The fix when an explicit address is the embedded containerd's and it is down:
    ctrexec starts it on its own only when no address is given (see :func:`connect`)."""
    # Here, not at the top: only a failed connection needs the daemon's paths.
    from ctrexec import EmbeddedContainerd

    daemon = EmbeddedContainerd()
    if os.path.realpath(address) != os.path.realpath(daemon.address) or daemon.is_running():
        return ""
    return "; the embedded containerd is not running: run `ctrexec daemon start`"


def executor(args: argparse.Namespace, client: Client | None = None) -> Executor:
    """The Executor of every command, on ``client`` or a new connection (:func:`connect`).

    One log-dir policy: the command's ``--log-dir`` where it has that flag (the verbs
    that create tasks, ``group``, ``supervise``), else the default. It only says where
    a new task's log goes; every record keeps its own log path, so a command without
    the flag still reads and removes the logs of a task made with it.
    Imported here, not at the top: parsing and ``--help`` load none of the library.
    """
    from pathlib import Path

    from ctrexec import Executor

    log_dir = Path(getattr(args, "log_dir", None) or DEFAULT_LOG_DIR)
    return Executor(connect(args) if client is None else client, log_dir=log_dir)


def resolver(client: Client) -> ContainerLookup:
    """The ids a user's words name (docker's unique-prefix rule), for one command: its
    words are matched against one listing. Imported here: parsing loads no library."""
    from ctrexec import ContainerLookup

    return ContainerLookup(client)


def print_json(value: Any, *, sort_keys: bool = True) -> None:
    """Indented JSON; ``sort_keys=False`` keeps the order it was built in (docker's)."""
    import json

    json.dump(value, sys.stdout, indent=2, sort_keys=sort_keys, default=str)
    sys.stdout.write("\n")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Left-aligned columns, like docker's listings."""
    cells = [[str(h) for h in headers], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for r in cells:
        print("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


#: ``Tasks.Pause: `` at the start of a translated gRPC error: the call, not the user's words.
_RPC_NAME = re.compile(r"^(?:[A-Z][A-Za-z]*\.)+[A-Z][A-Za-z]*: ")
#: runc's and containerd's code for an error they did not classify.
_NOISE = (": unknown", ": internal")
#: The longest error line printed, in characters; a longer one keeps its start and its
#: end (where the reason is) around a note of what was cut. Values are quoted cut
#: already (errors.quoted): this is the last guard, for a message that quoted whole.
LINE_LIMIT = 1000
_LINE_HEAD, _LINE_TAIL = 600, 300


def user_words(err: CtrexecError) -> str:
    """The first line of an error without the RPC's name or runc's ``: unknown``.

    The library's messages are meant for users already; this is the last guard for a
    failure no seam rephrased, so a user never reads containerd's method names.
    """
    text = str(err).strip()
    msg = _RPC_NAME.sub("", text.splitlines()[0]) if text else type(err).__name__
    for noise in _NOISE:
        msg = msg.removesuffix(noise)
    return bounded(msg)


def bounded(line: str) -> str:
    """``line`` cut to about :data:`LINE_LIMIT` characters, saying how many it had."""
    if len(line) <= LINE_LIMIT:
        return line
    cut = len(line) - _LINE_HEAD - _LINE_TAIL
    return f"{line[:_LINE_HEAD]}[… {cut} characters cut …]{line[-_LINE_TAIL:]}"


def fail(err: CtrexecError) -> int:
    """Print one line for a ctrexec error and return its exit code."""
    print(f"ctrexec: {user_words(err)}", file=sys.stderr)
    return err.exit_code


@contextlib.contextmanager
def signal_pipe(signals: tuple[int, ...]) -> Iterator[int]:
    """A pipe that receives the number of each of ``signals`` as it arrives.

    The Python-level handlers do nothing; the C-level handler writes the byte
    (``signal.set_wakeup_fd``), which is safe at any instruction: no KeyboardInterrupt
    lands inside a gRPC call, and a loop waits on the pipe instead of sleeping.
    """
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.set_blocking(write_end, False)
    old_handlers = {s: signal.signal(s, lambda _n, _f: None) for s in signals}
    old_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    try:
        yield read_end
    finally:
        signal.set_wakeup_fd(old_fd)
        for s, h in old_handlers.items():
            signal.signal(s, h)
        os.close(read_end)
        os.close(write_end)


def until_signal(wakeup: int, alive: Callable[[], bool], poll: float = 0.5) -> bool:
    """Wait on a :func:`signal_pipe` until a signal comes (True) or ``alive()`` ends (False).

    For a command whose work runs on another thread: the main thread only waits, so a
    signal's byte is read here, in plain code, and the caller stops the work.
    """
    while alive():
        if select.select([wakeup], [], [], poll)[0]:
            with contextlib.suppress(BlockingIOError):
                os.read(wakeup, 64)
            return True
    return False
