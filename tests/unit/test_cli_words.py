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
