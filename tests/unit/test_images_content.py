"""Content writes/adoption against a fake Content service, and in-root file reads."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import empty_pb2
from google.protobuf.message import Message

from ctrexec import _linux, _rpc, errors
from ctrexec._api.containerd.services.content.v1 import content_pb2
from ctrexec.containerd import content, snapshots
from ctrexec.containerd.content import Descriptor
from ctrexec.images import store as imagestore


class FakeStore:
    """containerd's content store, reduced: one disk, per-namespace visibility."""

    def __init__(self, *, shared: bool) -> None:
        self.shared = shared
        self.disk: dict[str, bytes] = {}
        self.visible: dict[str, dict[str, dict[str, str]]] = {}  # ns -> digest -> labels
        self.reads = 0
        self.aborted: list[str] = []

    def put(self, ns: str, data: bytes, labels: dict[str, str] | None = None) -> Descriptor:
        d = "sha256:" + hashlib.sha256(data).hexdigest()
        self.disk[d] = data
        self.visible.setdefault(ns, {})[d] = dict(labels or {})
        return Descriptor("application/octet-stream", d, len(data))


class _Write(Iterator[content_pb2.WriteContentResponse]):
    def __init__(self, store: FakeStore, ns: str, requests: Iterable[Message]) -> None:
        self.store, self.ns, self.requests = store, ns, iter(requests)
        self.buf = b""
        self.expected = ""

    def __next__(self) -> content_pb2.WriteContentResponse:
        req = next(self.requests)
        assert isinstance(req, content_pb2.WriteContentRequest)
        have = self.store.visible.setdefault(self.ns, {})
        self.expected = req.expected or self.expected
        if req.expected and req.expected in have:
            raise errors.AlreadyExists(f"content {req.expected}: already exists")
        on_disk = self.store.shared and self.expected in self.store.disk
        offset = len(self.store.disk[self.expected]) if on_disk and not self.buf else len(self.buf)
        if req.action == content_pb2.WRITE:
            assert req.offset == len(self.buf)
            self.buf += req.data
            offset = len(self.buf)
        elif req.action == content_pb2.COMMIT:
            assert req.offset == offset, "a commit at offset 0 would truncate"
            data = self.store.disk[self.expected] if on_disk and not self.buf else self.buf
            assert "sha256:" + hashlib.sha256(data).hexdigest() == req.expected
            assert len(data) == req.total
            self.store.disk[req.expected] = data
            have[req.expected] = dict(req.labels)
        return content_pb2.WriteContentResponse(
            action=req.action, offset=offset, digest=self.expected
        )

    def cancel(self) -> None:
        pass


class _Read(Iterator[content_pb2.ReadContentResponse]):
    def __init__(self, store: FakeStore, ns: str, req: content_pb2.ReadContentRequest) -> None:
        if req.digest not in store.visible.get(ns, {}):
            raise errors.NotFound(f"content {req.digest}: not found")
        store.reads += 1
        data = store.disk[req.digest][req.offset :]
        self.chunks = iter(
            content_pb2.ReadContentResponse(offset=req.offset + i, data=data[i : i + 5])
            for i in range(0, len(data), 5)
        )

    def __next__(self) -> content_pb2.ReadContentResponse:
        return next(self.chunks)

    def cancel(self) -> None:
        pass


class FakeConn:
    def __init__(self, store: FakeStore) -> None:
        self.store = store

    def bidi_stream(
        self,
        service: str,
        method: str,
        requests: Iterable[Message],
        rt: Any,
        *,
        namespace: str,
        **_: Any,
    ) -> _Write:
        assert (service, method) == (_rpc.CONTENT, "Write")
        return _Write(self.store, namespace, requests)

    def server_stream(
        self, service: str, method: str, request: Message, rt: Any, *, namespace: str, **_: Any
    ) -> _Read:
        assert (service, method) == (_rpc.CONTENT, "Read")
        assert isinstance(request, content_pb2.ReadContentRequest)
        return _Read(self.store, namespace, request)


class FakeClient:
    def __init__(self, store: FakeStore, namespace: str) -> None:
        self.store, self.namespace, self._connection = store, namespace, FakeConn(store)

    def _call(self, service: str, method: str, request: Any, rt: Any, **_: Any) -> Any:
        have = self.store.visible.setdefault(self.namespace, {})
        if method == "Abort":
            self.store.aborted.append(request.ref)
            return empty_pb2.Empty()
        digest = request.digest if method == "Info" else request.info.digest
        if digest not in have:
            raise errors.NotFound(f"content {digest}: not found")
        if method == "Update":
            for path in request.update_mask.paths:
                key = path.removeprefix("labels.")
                have[digest][key] = request.info.labels[key]
        info = content_pb2.Info(
            digest=digest, size=len(self.store.disk[digest]), labels=have[digest]
        )
        return rt(info=info)


def _clients(shared: bool) -> tuple[FakeStore, Any, Any]:
    store = FakeStore(shared=shared)
    return store, FakeClient(store, "default"), FakeClient(store, "mine")


def test_adopt_blob_on_disk_moves_no_data() -> None:
    store, src, dst = _clients(shared=True)
    desc = store.put("default", b"hello world, a shared blob")
    copied = content.adopt_blob(src, dst, desc, lease="l1", labels={"k": "v"})
    assert copied is False
    assert store.reads == 0
    assert store.visible["mine"][desc.digest] == {"k": "v"}


def test_adopt_blob_missing_on_disk_streams_from_source() -> None:
    store, src, dst = _clients(shared=False)
    desc = store.put("default", b"0123456789" * 7)
    assert content.adopt_blob(src, dst, desc, lease="l1") is True
    assert store.reads == 1
    assert desc.digest in store.visible["mine"]


def test_adopt_blob_already_visible_only_adds_labels() -> None:
    store, src, dst = _clients(shared=True)
    desc = store.put("default", b"blob")
    store.visible["mine"] = {desc.digest: {"keep": "1"}}
    assert content.adopt_blob(src, dst, desc, lease="l1", labels={"new": "2"}) is False
    assert store.visible["mine"][desc.digest] == {"keep": "1", "new": "2"}
    assert store.aborted  # the write session was abandoned cleanly


def test_store_bytes_and_read_back() -> None:
    _, _, dst = _clients(shared=True)
    data = os.urandom(3000)
    desc = Descriptor("application/octet-stream", content.digest_of(data), len(data))
    imagestore.store_bytes(dst, desc, data, lease="l")
    assert content.read_blob(dst, desc) == data


def test_read_blob_detects_corruption() -> None:
    store, src, _ = _clients(shared=True)
    desc = store.put("default", b"original bytes")
    store.disk[desc.digest] = b"tampered bytes"
    with pytest.raises(errors.Internal):
        content.read_blob(src, desc)
    with pytest.raises(errors.Internal):  # size lies
        content.read_blob(src, Descriptor(desc.media_type, desc.digest, 3))


# -- reading inside a root ----------------------------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "secret").write_text("host secret\n")
    r = tmp_path / "root"
    (r / "etc").mkdir(parents=True)
    (r / "usr/lib").mkdir(parents=True)
    (r / "usr/lib/passwd").write_text("in image\n")
    (r / "etc/passwd").symlink_to("/usr/lib/passwd")
    (r / "etc/rel").symlink_to("../usr/lib/passwd")
    (r / "etc/up").symlink_to("../../../../secret")
    (r / "etc/abs-host").symlink_to(str(tmp_path / "secret"))
    (r / "lib").symlink_to("usr/lib")
    (r / "etc/loop").symlink_to("loop")
    os.mkfifo(r / "etc/fifo")
    return r


def test_read_in_root_never_escapes(root: Path) -> None:
    got = _linux.read_in_root(
        str(root),
        [
            "/etc/passwd",
            "etc/rel",
            "/lib/passwd",
            "/../../secret",
            "/etc/up",
            "/etc/abs-host",
            "/etc/loop",
            "/etc/fifo",
            "/etc",
            "/",
            "/usr/lib/passwd/x",
            "/missing",
        ],
    )
    assert got == {
        "/etc/passwd": b"in image\n",
        "etc/rel": b"in image\n",
        "/lib/passwd": b"in image\n",
        "/../../secret": None,
        "/etc/up": None,
        "/etc/abs-host": None,
        "/etc/loop": None,
        "/etc/fifo": None,  # not opened: a fifo would block
        "/etc": None,
        "/": None,
        "/usr/lib/passwd/x": None,
        "/missing": None,
    }


def test_read_in_root_size_limit(root: Path) -> None:
    with pytest.raises(errors.ResourceExhausted):
        _linux.read_in_root(str(root), ["/etc/passwd"], max_bytes=3)


def test_mount_options() -> None:
    flags, data = _linux.split_options(
        ["ro", "rbind", "nosuid", "index=off", "lowerdir=/a:/b", "rw"]
    )
    assert flags == _linux.MS_RDONLY | _linux.MS_BIND | _linux.MS_REC | _linux.MS_NOSUID
    assert data == ["index=off", "lowerdir=/a:/b"]


def test_compact_lowerdir() -> None:
    base = "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots"
    dirs = [f"{base}/{n}/fs" for n in range(200, 100, -1)]
    data = ["index=off", "lowerdir=" + ":".join(dirs)]
    short, chdir = _linux.compact_lowerdir(data, 4095)
    assert chdir == base
    assert short[1] == "lowerdir=" + ":".join(f"{n}/fs" for n in range(200, 100, -1))
    assert len(",".join(short)) < 4095
    assert _linux.compact_lowerdir(["lowerdir=/a:/b"], 4095) == (["lowerdir=/a:/b"], None)


def test_mount_round_trip() -> None:
    m = snapshots.RootfsMount("overlay", "overlay", "", ("lowerdir=/a:/b",))
    assert snapshots.RootfsMount.from_proto(m.to_proto()) == m


def test_begin_write_of_a_blob_the_namespace_has_only_sets_labels() -> None:
    store, _, dst = _clients(shared=True)
    desc = store.put("mine", b"blob", {"keep": "1"})
    session = content.WriteSession(dst, "ctrexec-test-ref", None)
    assert content.begin_write(session, desc, {"new": "2"}) is None
    assert store.visible["mine"][desc.digest] == {"keep": "1", "new": "2"}
    assert store.aborted == ["ctrexec-test-ref"]  # nothing is left ingesting


def test_begin_write_of_a_blob_on_disk_elsewhere_starts_at_its_end() -> None:
    store, _, dst = _clients(shared=True)
    desc = store.put("default", b"some bytes")
    session = content.WriteSession(dst, "ctrexec-test-ref", None)
    assert content.begin_write(session, desc, {}) == desc.size  # commit only, no data
    session.commit(desc, desc.size, {})
    session.finish()
    assert desc.digest in store.visible["mine"]


def test_json_strings() -> None:
    assert content.json_strings(None, "x") == ()
    assert content.json_strings(["a", "b"], "x") == ("a", "b")
    with pytest.raises(errors.InvalidArgument, match=r"^manifest\.json Layers must be a list"):
        content.json_strings(["a", 1], "manifest.json Layers")


def test_write_sends_ahead_of_the_answers_and_checks_each(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(content, "_CHUNK", 4)  # 10 writes, more than the window
    store, _, dst = _clients(shared=False)
    data = bytes(range(37))
    desc = Descriptor("application/octet-stream", content.digest_of(data), len(data))
    session = content.WriteSession(dst, "ctrexec-test-ref", None)
    assert content.begin_write(session, desc, {}) == 0
    assert session.write(0, [data[:9], data[9:]], desc) == len(data)
    session.commit(desc, len(data), {})
    session.finish()
    assert store.disk[desc.digest] == data

    # an answer at another offset than the one sent is an error, not a silent gap
    monkeypatch.setattr(_Write, "__next__", lambda self: content_pb2.WriteContentResponse(offset=1))
    other = content.WriteSession(dst, "ctrexec-test-ref-2", None)
    with pytest.raises(errors.Internal, match="write reached 1"):
        other.write(0, [data], desc)
    other.close()


def test_a_failing_source_keeps_what_was_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    # the registry going away mid-blob: the writes still in flight are answered before
    # the failure goes up, so the ingest keeps them for a retry to resume from; and
    # progress heard only the offsets containerd answered, never one merely sent
    monkeypatch.setattr(content, "_CHUNK", 4)
    _, _, dst = _clients(shared=False)
    data = bytes(range(37))
    desc = Descriptor("application/octet-stream", content.digest_of(data), len(data))
    session = content.WriteSession(dst, "ctrexec-test-ref", None)
    assert content.begin_write(session, desc, {}) == 0
    heard: list[int] = []

    def source() -> Iterator[bytes]:
        yield data[:12]  # three writes: fewer than the window, none answered yet
        assert heard == []
        raise errors.Unavailable("registry went away")

    with pytest.raises(errors.Unavailable, match="registry went away"):
        session.write(0, source(), desc, heard.append)
    assert heard == [4, 8, 12]
    assert isinstance(session._stream, _Write)
    assert session._stream.buf == data[:12]
    session.close()
