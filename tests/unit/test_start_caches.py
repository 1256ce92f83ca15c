"""The start path's caches: hits and misses, bounds, thread safety, keys by digest."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ctrexec.containerd import images, runtimes
from ctrexec.containerd.content import Descriptor, Platform
from ctrexec.containerd.memo import Memo
from ctrexec.errors import InvalidArgument, NotFound


def test_memo_hit_and_miss() -> None:
    memo: Memo[str, int] = Memo()
    calls: list[str] = []
    assert memo.get_or_compute("a", lambda: calls.append("a") or 1) == 1
    assert memo.get_or_compute("a", lambda: calls.append("again") or 2) == 1
    assert calls == ["a"]
    assert (memo.hits, memo.misses) == (1, 1)
    assert memo.get("b") is None and "b" not in memo


def test_memo_does_not_store_a_failure() -> None:
    memo: Memo[str, int] = Memo()

    def boom() -> int:
        raise NotFound("gone")

    with pytest.raises(NotFound):
        memo.get_or_compute("a", boom)
    assert "a" not in memo
    assert memo.get_or_compute("a", lambda: 3) == 3


def test_memo_drops_the_least_recently_used() -> None:
    memo: Memo[int, int] = Memo(max_entries=2)
    memo.put(1, 1)
    memo.put(2, 2)
    assert memo.get(1) == 1  # 2 is now the oldest
    memo.put(3, 3)
    assert 2 not in memo and 1 in memo and 3 in memo
    assert len(memo) == 2


def test_memo_forget() -> None:
    memo: Memo[tuple[str, str], int] = Memo()
    memo.put(("ns", "sha256:a"), 1)
    memo.put(("ns", "sha256:b"), 2)
    memo.put(("other", "sha256:a"), 3)
    for key in [("ns", "sha256:b"), ("ns", "sha256:a"), ("other", "sha256:a")]:
        memo.forget(key)
    memo.forget(("ns", "sha256:c"))  # not there: fine
    assert len(memo) == 0


def test_memo_shared_by_threads() -> None:
    memo: Memo[int, int] = Memo(max_entries=16)
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            barrier.wait()
            for i in range(2000):
                key = (i * 7 + seed) % 32
                assert memo.get_or_compute(key, lambda k=key: k * k) == key * key  # type: ignore[misc]
        except BaseException as exc:  # surfaced below, with the thread's failure
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(memo) <= 16
    assert memo.hits + memo.misses == 8 * 2000


def test_memo_refuses_no_room() -> None:
    with pytest.raises(ValueError):
        Memo(max_entries=0)


class _FakeClient:
    namespace = "ns"


def _record(digest: str) -> Any:
    from ctrexec._api.containerd.services.images.v1 import images_pb2
    from ctrexec._api.containerd.types import descriptor_pb2

    return images_pb2.Image(
        name="docker.io/library/x:latest",
        target=descriptor_pb2.Descriptor(
            media_type="application/vnd.oci.image.manifest.v1+json", digest=digest, size=2
        ),
    )


def _fake_walk(calls: list[str]) -> Any:
    config = Descriptor("application/vnd.oci.image.config.v1+json", "sha256:" + "c" * 64, 2)
    blob = images.ConfigBlob(images.ImageConfig(user="app"), None, (), None)

    def walk(client: Any, desc: Descriptor, want: Platform, **kw: Any) -> images._Walk:
        calls.append(desc.digest)
        return images._Walk((), desc, {}, config, blob, ())

    return walk


def test_image_walk_cached_by_target_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(images, "_walk", _fake_walk(calls))
    cache = images.ImageCache()
    want = Platform("linux", "amd64")
    one, two = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    client: Any = _FakeClient()
    first = images._find(client, _record(one), want, cache)[0]
    again = images._find(client, _record(one), want, cache)[0]
    assert first == again and first.config.user == "app"
    images._find(client, _record(two), want, cache)  # the tag moved: a new digest
    assert calls == [one, two]
    cache.forget(client, first, "overlayfs")
    images._find(client, _record(one), want, cache)
    assert calls == [one, two, one]
    images._find(client, _record(one), want)  # no cache: always read
    assert calls == [one, two, one, one]


def test_runtime_resolved_once_and_refusals_not_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    runtimes.resolve.cache_clear()
    looked: list[str] = []
    installed = {"containerd-shim-runc-v2"}

    def which(name: str) -> str | None:
        looked.append(name)
        return f"/usr/bin/{name}" if name in installed else None

    monkeypatch.setattr(runtimes.shutil, "which", which)
    with pytest.raises(InvalidArgument):
        runtimes.resolve("crun")
    installed.add("crun")
    choice = runtimes.resolve("crun")
    assert runtimes.resolve("crun") is choice
    assert looked == ["crun", "crun", "containerd-shim-runc-v2"]
    assert choice.to_runtime() is choice.to_runtime()
    assert choice.to_runtime().options is not None
    runtimes.resolve.cache_clear()


def test_spec_options_in_place_keep_base_and_options_untouched() -> None:
    """build_spec edits its private spec in place (no copy per option), yet the base,
    the option and the result share nothing: the next build sees none of it."""
    from ctrexec import oci
    from ctrexec.oci import process

    base = oci.default_spec()
    snapshot = repr(base)
    env = process.with_env(["A=1"])
    first = oci.build_spec(env, process.with_args(["x"]), base=base)
    first["process"]["env"].append("B=2")
    first["linux"]["seccomp"]["syscalls"].clear()
    second = oci.build_spec(env, base=base)
    assert repr(base) == snapshot
    assert "B=2" not in second["process"]["env"] and "A=1" in second["process"]["env"]
    assert second["linux"]["seccomp"]["syscalls"]
    assert env(base) == second and repr(base) == snapshot  # still a pure option
