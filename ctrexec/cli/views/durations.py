"""docker's wording of an age, apart from ``ps``: the ``images`` table and ``doctor``
print ages too, and must not load the task values (grpc, attrs) ``ps`` is built on.

Standard library only.
"""

from __future__ import annotations


def human_duration(seconds: float) -> str:
    """docker's (go-units') wording of an age: ``About a minute``, ``3 hours``."""
    s = int(seconds)
    steps = [
        (1, "Less than a second", None),
        (2, "1 second", None),
        (60, None, (1, "seconds")),
        (120, "About a minute", None),
        (3600, None, (60, "minutes")),
        (7200, "About an hour", None),
        (48 * 3600, None, (3600, "hours")),
        (14 * 86400, None, (86400, "days")),
        (90 * 86400, None, (7 * 86400, "weeks")),
        (2 * 365 * 86400, None, (30 * 86400, "months")),
    ]
    for limit, fixed, unit in steps:
        if s < limit:
            return fixed if fixed else f"{s // unit[0]} {unit[1]}"  # type: ignore[index]
    return f"{s // (365 * 86400)} years"
