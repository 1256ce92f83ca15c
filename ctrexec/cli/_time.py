"""docker's ``--since``/``--until`` values: a time, a Unix timestamp, or an age (``10m``)."""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datetime import datetime

_AGE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def point_in_time(text: str, now: datetime | None = None) -> datetime:
    """``2026-12-01T10:00:00Z``, ``1764583200`` (seconds), or ``1h30m`` ago (Go's units)."""
    from datetime import UTC, datetime, timedelta

    now = now or datetime.now(UTC)
    if text and re.fullmatch(f"(?:{_AGE.pattern})+", text):
        seconds = sum(float(n) * _UNIT[u] for n, u in _AGE.findall(text))
        return now - timedelta(seconds=seconds)
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return datetime.fromtimestamp(float(text), UTC)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a time (2026-12-01T10:00:00Z), a Unix timestamp or an age (10m), "
            f"got {text!r}"
        ) from None
    return when if when.tzinfo else when.astimezone(UTC)
