"""The container record keeps a TaskConfig by what it sets, not by every field.

An older ctrexec refuses a record key it does not know, and is right to: it could not
honour the field. So the record must name only the fields a task sets; then a task
that uses none of a newer release's fields stays readable after a downgrade.
"""

from __future__ import annotations

import json

import attrs
import pytest

from ctrexec.errors import InvalidArgument
from ctrexec.tasks.config import RestartPolicy, TaskConfig

pytestmark = pytest.mark.unit


def _through_json(config: TaskConfig) -> TaskConfig:
    return TaskConfig.from_json(json.loads(json.dumps(config.to_record())))


def test_a_plain_task_records_only_its_name_and_image() -> None:
    config = TaskConfig(name="web", image="busybox")
    assert config.to_record() == {"name": "web", "image": "busybox"}
    assert _through_json(config) == config


def test_every_field_set_survives_the_record() -> None:
    config = TaskConfig(
        name="web",
        image="busybox",
        command=("sh", "-c", "sleep 1"),
        env={"A": "1"},
        workdir="/tmp",
        read_only=True,
        restart=RestartPolicy(policy="on-failure", max_attempts=3),
    )
    record = config.to_record()
    assert set(record) == {"name", "image", "command", "env", "workdir", "read_only", "restart"}
    assert _through_json(config) == config


def test_a_field_set_back_to_its_default_is_left_out() -> None:
    config = attrs.evolve(TaskConfig(name="web", image="busybox", read_only=True), read_only=False)
    assert "read_only" not in config.to_record()


def test_a_record_from_a_newer_release_is_refused_naming_the_key() -> None:
    record = {"name": "web", "image": "busybox", "from_the_future": 1}
    with pytest.raises(InvalidArgument, match="unknown task config keys: from_the_future"):
        TaskConfig.from_json(record)
