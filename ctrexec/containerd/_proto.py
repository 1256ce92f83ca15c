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
