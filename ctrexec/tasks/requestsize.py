"""Whether a container's settings fit in containerd's one request, checked when a
config is made, before any call.

Containers.Create carries a task's settings twice: as the record's extension (the
TaskConfig's JSON, which ctrexec reads back) and in the OCI spec (the command, its
environment, hostname, mounts, annotations). gRPC refuses a message over
``_rpc.MAX_MESSAGE_BYTES`` (16 MiB, containerd's own limit too) with its own words
(``Sent message larger than max``), after the image is pulled and with no field named.
So a config whose fields take more than half of what is left of a request once the
rest of it is set aside (the image's config in the spec, ctrexec's labels) is refused
here, naming the field that takes the most.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ctrexec import _rpc
from ctrexec.errors import InvalidField

MIB = 1024 * 1024
#: What a request holds besides the config's fields: the spec's own keys, the image's
#: environment and command merged in, the labels ctrexec writes.
RESERVE_BYTES = 1 * MIB
#: The most a config's fields may take in JSON: each is in the request twice.
BUDGET_BYTES = (_rpc.MAX_MESSAGE_BYTES - RESERVE_BYTES) // 2
#: The most bytes one character can take in JSON (``\ud83d\ude00``): below this many
#: characters in all, no config can be over, and nothing is encoded to check.
_WORST_PER_CHAR = 12


#: Why a container's settings are held to :data:`BUDGET_BYTES`.
CONTAINER = "a container's request holds its settings twice (its record and its OCI spec)"
#: Why an exec's are: its process spec carries the container's own environment too,
#: which may take as much.
EXEC = "an exec's request also holds the container's own environment"


def check(values: Iterable[tuple[str, Any]], why: str = CONTAINER) -> None:
    """Refuse fields (``name, value`` pairs) that would not fit, naming the largest;
    ``why`` says what else the request holds."""
    fields = list(values)
    if sum(_chars(v) for _, v in fields) * _WORST_PER_CHAR <= BUDGET_BYTES:
        return
    sizes = sorted(((_json_size(v), n, v) for n, v in fields), key=lambda s: s[0], reverse=True)
    total = sum(size for size, _, _ in sizes)
    if total <= BUDGET_BYTES:
        return
    size, name, value = sizes[0]
    limit = (
        f"containerd accepts at most {_mib(_rpc.MAX_MESSAGE_BYTES)} per request, and "
        f"{why}, so they may take at most {_mib(BUDGET_BYTES)}"
    )
    if size > BUDGET_BYTES:
        reason = f"the {name} is {_mib(size)}; {limit}"
    else:
        big = [f"{n} {_mib(s)}" for s, n, _ in sizes[:3] if s * 10 >= total]
        reason = f"the settings come to {_mib(total)} ({', '.join(big)}); {limit}"
    raise InvalidField(name, value, reason)


def _chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, tuple | list):
        return sum(_chars(v) for v in value) + len(value)
    if isinstance(value, Mapping):
        return sum(_chars(k) + _chars(v) for k, v in value.items())
    return 8


def _json_size(value: Any) -> int:
    """The value's bytes in the record's JSON (``json.dumps``' defaults, as the record's;
    a tuple is a list there)."""
    return len(json.dumps(value, default=str))


def _mib(size: int) -> str:
    return f"{size / MIB:.1f} MiB"
