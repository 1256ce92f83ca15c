"""The driver_state handle across releases: the bytes today's plugin gave Nomad
(tests/data/nomad-driver-state-v1.json) still decode, and a version this plugin does
not know is refused with one clear line."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ctrexec.errors import FailedPrecondition, InvalidArgument
from ctrexec.nomad.taskmap import DriverState, container_id

V1 = json.loads((Path(__file__).parent.parent / "data" / "nomad-driver-state-v1.json").read_text())


def test_the_released_v1_handle_decodes() -> None:
    state = DriverState.decode(V1["driver_state"].encode())
    assert state.container_id == container_id(V1["task_id"])
    assert state.namespace == "ctrexec-test-nomad"
    assert state.started_at == datetime(2026, 12, 5, 6, 15, 2, 123456, tzinfo=UTC)


def test_encode_keeps_the_version_a_top_level_integer() -> None:
    s = DriverState(container_id="c", namespace="n", started_at=datetime.now(UTC))
    raw = json.loads(s.encode())
    assert type(raw["version"]) is int
    assert DriverState.decode(s.encode()) == s


@pytest.mark.parametrize("version", [99, 0, "1", 1.0, None, True])
def test_an_unknown_version_is_refused_in_one_line(version: object) -> None:
    raw = json.loads(V1["driver_state"])
    raw["version"] = version
    with pytest.raises(FailedPrecondition) as caught:
        DriverState.decode(json.dumps(raw).encode())
    text = str(caught.value)
    assert f"driver_state version {version!r} is unknown" in text
    assert "it reads 1" in text and "\n" not in text


@pytest.mark.parametrize(
    "data",
    [
        b"\x81\xa1a\x01",  # not JSON
        b"[1, 2]",
        b'"text"',
        b'{"container_id": "c"}',  # no version
        b'{"version": 1, "namespace": "n", "started_at": "2026-12-05T06:15:02+00:00"}',
        b'{"version": 1, "container_id": "c", "namespace": "n", "started_at": "yesterday"}',
    ],
)
def test_garbage_and_damaged_handles_are_invalid(data: bytes) -> None:
    with pytest.raises(InvalidArgument):
        DriverState.decode(data)
