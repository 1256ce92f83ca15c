"""A container's rootfs snapshot key names its container, and only it."""

from __future__ import annotations

from ctrexec.tasks.records import is_snapshot_key_of, new_snapshot_key


def test_a_snapshot_key_is_known_as_its_names_and_no_other() -> None:
    key = new_snapshot_key("web")
    assert is_snapshot_key_of(key, "web")
    assert not is_snapshot_key_of(key, "we")
    assert not is_snapshot_key_of(new_snapshot_key("web-0123abcd"), "web")
    assert not is_snapshot_key_of("web-0123ABCD", "web")
    assert not is_snapshot_key_of("web-0123abc", "web")
