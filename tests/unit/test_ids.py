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


def test_by_prefix_exact_wins_unique_prefix_ambiguous_refused() -> None:
    from ctrexec.errors import AmbiguousPrefix
    from ctrexec.ids import by_prefix

    names = ["ctrexec-fbe4a1b2c3d4e5f6", "ctrexec-fbe4ffff00001111", "web", "web-2", "db"]
    assert by_prefix("web", names) == "web"  # an exact name beats being web-2's prefix
    assert by_prefix("ctrexec-fbe4a", names) == "ctrexec-fbe4a1b2c3d4e5f6"
    assert by_prefix("web-", names) == "web-2"
    assert by_prefix("d", names) == "db"
    assert by_prefix("nosuch", names) is None
    assert by_prefix("", names) is None  # not "every container"
    with pytest.raises(AmbiguousPrefix) as info:
        by_prefix("ctrexec-fbe4", names)
    assert str(info.value) == "multiple IDs found with provided prefix: ctrexec-fbe4"
