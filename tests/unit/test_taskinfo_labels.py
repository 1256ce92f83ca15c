"""TaskInfo's typed readings of ctrexec's labels: what ``inspect`` and ``ps`` show
(docker's network, Mounts, Entrypoint/Cmd split, WorkingDir) without a front end
knowing a label key. Each case writes the labels as create and ``run -p`` do."""

from __future__ import annotations

from collections.abc import Mapping

from ctrexec import Status, TaskInfo
from ctrexec import labels as lbl


def _info(labels: Mapping[str, str]) -> TaskInfo:
    return TaskInfo(
        id="web", image="busybox", status=Status.CREATED, pid=0, exit=None,
        netns_path="/run/netns/cx-web", netns_mode="path", group=None, log_path="",
        labels=labels, created_at=None, config=None,
    )  # fmt: skip


def test_a_record_without_ctrexecs_labels_reads_as_nothing_known() -> None:
    info = _info({})
    assert info.network is None
    assert info.volume_names == ()
    assert info.image_entrypoint_args is None
    assert info.image_workdir is None


def test_the_network_is_the_bridge_or_the_cni_networks_own_name() -> None:
    assert _info({lbl.NETWORK_MODE: "bridge"}).network == "bridge"
    assert _info({lbl.NETWORK_MODE: "cni:backend"}).network == "backend"


def test_volumes_entrypoint_and_workdir_are_read_typed() -> None:
    info = _info({
        lbl.VOLUMES: "data,0123abcd",
        lbl.IMAGE_ENTRYPOINT_ARGS: "2",
        lbl.IMAGE_WORKDIR: "/srv",
    })  # fmt: skip
    assert info.volume_names == ("data", "0123abcd")
    assert info.image_entrypoint_args == 2
    assert info.image_workdir == "/srv"
    # a value ctrexec did not write (edited by hand) is no count
    assert _info({lbl.IMAGE_ENTRYPOINT_ARGS: "x"}).image_entrypoint_args is None
