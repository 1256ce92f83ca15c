"""The CLI's last guard: no RPC name or runc suffix in an error line."""

from __future__ import annotations

import pytest

from ctrexec.cli._common import user_words
from ctrexec.errors import FailedPrecondition, Internal, NotFound


@pytest.mark.parametrize(
    ("err", "words"),
    [
        (Internal("Tasks.Pause: cannot pause a paused container: unknown"),
         "cannot pause a paused container"),
        (NotFound("Images.Get: image \"x\": not found"), 'image "x": not found'),
        (FailedPrecondition("container web is already paused"), "container web is already paused"),
        (Internal("first line\nsecond"), "first line"),
        (Internal(""), "Internal"),
    ],
)  # fmt: skip
def test_user_words(err: Exception, words: str) -> None:
    assert isinstance(err, Internal | NotFound | FailedPrecondition)
    assert user_words(err) == words


def test_point_in_time() -> None:
    import argparse
    from datetime import UTC, datetime, timedelta

    from ctrexec.cli._time import point_in_time

    now = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    assert point_in_time("1h30m", now) == now - timedelta(minutes=90)
    assert point_in_time("500ms", now) == now - timedelta(milliseconds=500)
    assert point_in_time("1764583200", now) == datetime(2025, 12, 1, 10, 0, tzinfo=UTC)
    assert point_in_time("2026-12-01T09:00:00Z", now) == now - timedelta(hours=1)
    with pytest.raises(argparse.ArgumentTypeError, match="expected a time"):
        point_in_time("yesterday", now)


def test_until_then_tail() -> None:
    from datetime import UTC, datetime

    from ctrexec.cli.verbs import until
    from ctrexec.logs.reader import LogEntry

    entries = [LogEntry("stdout", f"{n}\n", n * 10**9) for n in range(1, 6)]
    when = datetime.fromtimestamp(3, UTC)
    assert [e.message for e in until(entries, when, None)] == ["1\n", "2\n", "3\n"]
    assert [e.message for e in until(entries, when, 2)] == ["2\n", "3\n"]
    assert list(until(entries, when, 0)) == []
