from __future__ import annotations

import pytest

from ctrexec.errors import InvalidArgument
from ctrexec.ids import is_valid_id, validate_id


@pytest.mark.parametrize("good", ["a", "web-1", "a.b_c-d", "A9", "x" * 76])
def test_valid(good: str) -> None:
    assert validate_id(good) == good
    assert is_valid_id(good)


@pytest.mark.parametrize(
    "bad",
    ["", "a/b", "..", "a..b", "a b", "a\x00b", "-a", "a-", "x" * 77, "é", "a\nb", "/etc", "abc\n"],
)
def test_invalid(bad: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        validate_id(bad, kind="container id")
    assert "\n" not in str(info.value)
    assert not is_valid_id(bad)
