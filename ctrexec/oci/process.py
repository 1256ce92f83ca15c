"""The task's process: arguments, environment, working directory, identity, limits.

:func:`resolve_args` applies docker's ENTRYPOINT/CMD rules as a pure function,
so the CLI, the executor and the tests agree on what an image runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ctrexec.errors import InvalidArgument
from ctrexec.oci._base import Spec, SpecOpt, check_container_path, mutating, process_of

#: Docker's default PATH, added when neither the image nor the user sets one.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

#: Largest uid/gid docker accepts (2**31 - 1): larger ones break many tools.
MAX_ID = 2**31 - 1

#: Resource limits runc knows, by their short names.
RLIMIT_NAMES = frozenset(
    {
        "AS",
        "CORE",
        "CPU",
        "DATA",
        "FSIZE",
        "LOCKS",
        "MEMLOCK",
        "MSGQUEUE",
        "NICE",
        "NOFILE",
        "NPROC",
        "RSS",
        "RTPRIO",
        "RTTIME",
        "SIGPENDING",
        "STACK",
    }
)

_RLIM_INFINITY = 2**64 - 1


def _check_strings(values: Sequence[str], what: str) -> list[str]:
    if isinstance(values, str):
        raise InvalidArgument(f"{what} must be a list of strings, not one string")
    checked = list(values)
    for value in checked:
        if not isinstance(value, str):
            raise InvalidArgument(f"{what} must contain only strings, got {value!r}")
        if "\x00" in value:
            raise InvalidArgument(f"{what} must not contain NUL bytes")
    return checked


def resolve_args(
    entrypoint: Sequence[str] | None,
    cmd: Sequence[str] | None,
    user_entrypoint: Sequence[str] | None = None,
    user_cmd: Sequence[str] | None = None,
) -> list[str]:
    """The argv to run, from the image's Entrypoint/Cmd and the user's overrides.

    Docker's rules:

    - the user's command (non-empty) replaces the image's Cmd;
    - a user entrypoint (even an empty one) replaces the image's Entrypoint and
      clears the image's Cmd, so only the user's command follows it;
    - an entrypoint of one empty string (what ``--entrypoint ''`` sends through
      docker's API) is an empty one;
    - argv is entrypoint + cmd, and must not be empty.

    Shell-form Dockerfile instructions arrive already wrapped as
    ``["/bin/sh", "-c", "..."]``, so they need no special case here.
    """
    image_entry = _check_strings(entrypoint or [], "entrypoint")
    image_cmd = _check_strings(cmd or [], "cmd")
    user_args = _check_strings(user_cmd or [], "command")
    if user_entrypoint is not None:
        final_entry = _check_strings(user_entrypoint, "entrypoint")
        final_entry = [] if final_entry == [""] else final_entry
        final_cmd = user_args
    else:
        final_entry = image_entry
        final_cmd = user_args or image_cmd
    args = final_entry + final_cmd
    if not args or not args[0]:
        raise InvalidArgument("no command specified")
    return args


def with_args(args: Sequence[str]) -> SpecOpt:
    """Run ``args`` (argv; ``args[0]`` is looked up in the task's PATH by runc)."""
    checked = _check_strings(args, "args")
    if not checked or not checked[0]:
        raise InvalidArgument("args must not be empty")

    def apply(spec: Spec) -> None:
        process_of(spec)["args"] = list(checked)

    return mutating(apply)


def _split_env(entry: str, what: str) -> tuple[str, str]:
    if not isinstance(entry, str):
        raise InvalidArgument(f"{what} entry must be a string, got {entry!r}")
    key, sep, value = entry.partition("=")
    if not sep or not key:
        raise InvalidArgument(f"{what} entry {entry!r} must look like KEY=VALUE")
    if "\x00" in entry:
        raise InvalidArgument(f"{what} entry for {key!r} contains a NUL byte")
    return key, value


def _env_pairs(env: Sequence[str] | Mapping[str, str], what: str) -> list[tuple[str, str]]:
    if isinstance(env, str):
        raise InvalidArgument(f"{what} must be a list of KEY=VALUE or a mapping, not a string")
    if isinstance(env, Mapping):
        return [_split_env(f"{key}={value}", what) for key, value in env.items()]
    return [_split_env(entry, what) for entry in env]


def merge_env(base: Sequence[str], override: Sequence[str] | Mapping[str, str]) -> list[str]:
    """Merge two environments: ``override`` wins by key, and order is kept.

    Keys of ``base`` keep their position (with the new value); keys only in
    ``override`` follow, in its order. ``PATH`` is added if neither has one.
    """
    merged: dict[str, str] = dict(_env_pairs(base, "environment"))
    for key, value in _env_pairs(override, "environment"):
        merged[key] = value
    merged.setdefault("PATH", DEFAULT_PATH)
    return [f"{key}={value}" for key, value in merged.items()]


def with_env(env: Sequence[str] | Mapping[str, str]) -> SpecOpt:
    """Merge ``env`` into the task's environment, ``env`` winning by key.

    Apply the image's environment first and the user's after it:
    ``build_spec(with_env(image_env), with_env(user_env))``.
    """
    pairs = _env_pairs(env, "environment")

    def apply(spec: Spec) -> None:
        process = process_of(spec)
        process["env"] = merge_env(process.get("env") or [], dict(pairs))

    return mutating(apply)


def with_cwd(cwd: str) -> SpecOpt:
    """Start the task in ``cwd`` (absolute, inside the container)."""
    checked = check_container_path(cwd, "working directory")

    def apply(spec: Spec) -> None:
        process_of(spec)["cwd"] = checked

    return mutating(apply)


def with_tty(tty: bool = True) -> SpecOpt:
    """Give the task a terminal (the shim then needs a console socket)."""

    def apply(spec: Spec) -> None:
        process_of(spec)["terminal"] = bool(tty)

    return mutating(apply)


def _normalize_rlimit(name: str) -> str:
    if not isinstance(name, str):
        raise InvalidArgument(f"invalid rlimit name {name!r}")
    short = name.strip().upper().removeprefix("RLIMIT_")
    if short not in RLIMIT_NAMES:
        raise InvalidArgument(f"unknown rlimit {name!r}")
    return f"RLIMIT_{short}"


def with_rlimits(limits: Mapping[str, tuple[int, int]]) -> SpecOpt:
    """Set resource limits as ``{"nofile": (soft, hard)}``; each replaces its type.

    Names are accepted as ``nofile`` or ``RLIMIT_NOFILE``; ``soft <= hard``.
    """
    checked: dict[str, tuple[int, int]] = {}
    for name, pair in limits.items():
        full = _normalize_rlimit(name)
        try:
            soft, hard = pair
        except (TypeError, ValueError):
            raise InvalidArgument(f"rlimit {name!r} must be a (soft, hard) pair") from None
        for value in (soft, hard):
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not 0 <= value <= _RLIM_INFINITY
            ):
                raise InvalidArgument(f"rlimit {name!r} values must be non-negative integers")
        if soft > hard:
            raise InvalidArgument(f"rlimit {name!r}: soft limit {soft} exceeds hard limit {hard}")
        checked[full] = (soft, hard)

    def apply(spec: Spec) -> None:
        process = process_of(spec)
        kept = [r for r in process.get("rlimits") or [] if r.get("type") not in checked]
        process["rlimits"] = kept + [
            {"type": full, "soft": soft, "hard": hard} for full, (soft, hard) in checked.items()
        ]

    return mutating(apply)


#: The names ``--ulimit`` takes: docker's (go-units), each an ``RLIMIT_*`` of runc.
ULIMIT_NAMES = (
    "core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice", "nofile", "nproc",
    "rss", "rtprio", "rttime", "sigpending", "stack",
)  # fmt: skip


def parse_ulimit(text: str) -> tuple[str, int, int]:
    """docker's ``--ulimit NAME=SOFT[:HARD]`` as ``(RLIMIT_NAME, soft, hard)``.

    One value sets both; ``-1`` is unlimited. The errors are docker's.
    """
    name, sep, values = text.partition("=")
    if not sep:
        raise InvalidArgument(f"invalid ulimit argument: {text}")
    if name not in ULIMIT_NAMES:
        raise InvalidArgument(f"invalid ulimit type: {name}")
    parts = values.split(":")
    if len(parts) > 2:
        raise InvalidArgument(
            f"too many limit value arguments - {values}, can only have up to two, `soft[:hard]`"
        )
    numbers = []
    for part in parts:
        try:
            number = int(part, 10)
        except ValueError:
            raise InvalidArgument(f'invalid ulimit value "{part}" in {text}') from None
        if number < -1:
            raise InvalidArgument(f'invalid ulimit value "{part}" in {text}: -1 is unlimited')
        numbers.append(_RLIM_INFINITY if number == -1 else number)
    soft, hard = numbers[0], numbers[-1]
    if soft > hard:
        raise InvalidArgument(
            f"ulimit soft limit must be less than or equal to hard limit: {parts[0]} > {parts[-1]}"
        )
    return f"RLIMIT_{name.upper()}", soft, hard


def check_ulimits(texts: Sequence[str]) -> dict[str, tuple[int, int]]:
    """Each ``--ulimit`` parsed, by limit; a later one of the same name wins, as docker's."""
    return {name: (soft, hard) for name, soft, hard in map(parse_ulimit, texts)}


def with_no_new_privileges(enabled: bool = True) -> SpecOpt:
    """Set ``noNewPrivileges``: with it, setuid binaries and file caps grant nothing."""

    def apply(spec: Spec) -> None:
        process_of(spec)["noNewPrivileges"] = bool(enabled)

    return mutating(apply)


def with_oom_score_adj(score: int) -> SpecOpt:
    """Bias the OOM killer for the task (-1000 never kill .. 1000 kill first)."""
    if isinstance(score, bool) or not isinstance(score, int) or not -1000 <= score <= 1000:
        raise InvalidArgument(f"OOM score adjustment must be between -1000 and 1000, got {score!r}")

    def apply(spec: Spec) -> None:
        process_of(spec)["oomScoreAdj"] = score

    return mutating(apply)


def check_id(value: int, what: str) -> int:
    """Validate a uid or gid (0..2**31-1)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_ID:
        raise InvalidArgument(f"{what} must be an integer between 0 and {MAX_ID}, got {value!r}")
    return value


def with_user_ids(uid: int, gid: int, additional_gids: Iterable[int] = ()) -> SpecOpt:
    """Run the task as ``uid:gid`` with supplementary groups ``additional_gids``.

    Resolve names with :func:`ctrexec.oci.resolve_user` first.
    """
    user: dict[str, Any] = {"uid": check_id(uid, "uid"), "gid": check_id(gid, "gid")}
    extra = [check_id(g, "additional gid") for g in additional_gids]
    if extra:
        user["additionalGids"] = list(dict.fromkeys(extra))

    def apply(spec: Spec) -> None:
        process_of(spec)["user"] = dict(user)

    return mutating(apply)


#: Where ``--init`` puts the init binary in the task, and what ``inspect`` leaves out of
#: the argv: docker's own path, so tools that look for docker's init find it.
INIT_PATH = "/sbin/docker-init"


def with_init() -> SpecOpt:
    """Run the args set so far under the init at :data:`INIT_PATH` (``--init``).

    ``--`` ends the init's own options, so an argv that starts with ``-`` is the task's.
    Applied after :func:`with_args`; the binary is bound in by the caller.
    """

    def apply(spec: Spec) -> None:
        process = process_of(spec)
        process["args"] = [INIT_PATH, "--", *(process.get("args") or [])]

    return mutating(apply)


def without_init(args: Sequence[str]) -> list[str]:
    """The task's own argv out of one :func:`with_init` wrapped."""
    return list(args[2:]) if list(args[:2]) == [INIT_PATH, "--"] else list(args)
