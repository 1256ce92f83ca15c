"""docker's ``--env-file``: ``KEY=VALUE`` lines into a task's environment.

The one reader of such files, for ``run``/``create --env-file`` and a group file's
``env_file`` key alike. The format is docker's (its ``opts/file.go``), not a shell's:

- a line that is empty or starts with ``#`` after leading whitespace is skipped;
- ``KEY=VALUE``: the value is everything after the first ``=``, kept as written (no
  quotes removed, no ``$`` expanded, trailing spaces kept);
- a bare ``KEY`` takes the caller's value, and is left out when the caller has none;
- a key with whitespace in it, or none before the ``=``, is refused, as is a file that is
  not UTF-8.

Several files are read in order and a later value of a key wins; ``-e`` (a group file's
``env``) is applied after all of them, so it wins too, as docker's does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ctrexec.errors import InvalidArgument

if TYPE_CHECKING:
    from ctrexec.paths import StrPath

#: What docker trims from the left of a line and refuses inside a key.
_WHITESPACE = " \t"


def parse_env_text(text: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of one file's ``text``; a bare key's value comes from ``environ``."""
    env: dict[str, str] = {}
    for raw in text.removeprefix("\ufeff").splitlines():
        line = raw.lstrip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.lstrip(_WHITESPACE)
        if any(c in key for c in _WHITESPACE):
            raise InvalidArgument(
                f"poorly formatted environment: variable '{key}' contains whitespaces"
            )
        if not key:
            raise InvalidArgument(
                f"poorly formatted environment: no variable name on line '{line}'"
            )
        if sep:
            env[key] = value
        elif key in environ:
            env[key] = environ[key]
    return env


def read_env_files(
    paths: Iterable[StrPath], environ: Mapping[str, str], *, base: StrPath | None = None
) -> dict[str, str]:
    """The variables of each file in turn (a later one wins); a relative path is taken
    from ``base`` (the group file's directory), else from the current directory.
    ``environ`` gives a bare ``KEY`` its value. Public so that a scheduler reading
    docker's env files gets the CLI's exact format and errors."""
    env: dict[str, str] = {}
    for given in paths:
        path = Path(given)
        if base is not None and not path.is_absolute():
            path = Path(base) / path
        try:
            data = path.read_bytes()
        except FileNotFoundError as exc:
            raise InvalidArgument(f"open {given}: no such file or directory") from exc
        except IsADirectoryError as exc:
            raise InvalidArgument(f"read {given}: is a directory") from exc
        except OSError as exc:
            raise InvalidArgument(f"open {given}: {exc.strerror or exc}") from exc
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            raise InvalidArgument(
                f"env file {given} contains invalid utf8 bytes at line {line}"
            ) from exc
        env.update(parse_env_text(text, environ))
    return env
