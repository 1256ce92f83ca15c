"""Conversions between containerd's protobuf well-known types and Python values.

One place for them, so every record (containers, tasks, events, content, images,
snapshots) reads a time the same way: an unset protobuf Timestamp is all zeros,
which must come back as ``None``, not as 1970.
"""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp


def from_timestamp(ts: Timestamp | None) -> datetime | None:
    """A protobuf timestamp as an aware UTC datetime; None when absent or unset.

    ``ToDatetime`` works in integers, so a nanosecond field is truncated to the
    microsecond, never rounded through a float.
    """
    if ts is None or (ts.seconds == 0 and ts.nanos == 0):
        return None
    return ts.ToDatetime(tzinfo=UTC)


#: Go's zero ``time.Time`` (year 1): what a Go peer reads as "not set" without a nil.
GO_ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)


def to_timestamp(value: datetime | None) -> Timestamp:
    """A datetime as a Timestamp; None becomes Go's zero time, which Go peers such as
    Nomad convert without failing (an unset message there is a nil they dereference)."""
    ts = Timestamp()
    ts.FromDatetime(value if value is not None else GO_ZERO_TIME)
    return ts
