"""Reading a log from its end (issue 37): ``tail``/``since`` read what they print.

Every case compares with the forward read of the whole log, filtered afterwards: the
backward read must give the same entries (same partial lines, streams, times), and
leave a follower where the forward read leaves it.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from _logfollow import follow_in_thread

from ctrexec.logs import backward, modes
from ctrexec.logs.reader import LogEntry, LogWriter, decode_entry, encode_entry, read_logs
from ctrexec.testing import wait_for

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_123_456_789


def whole(path: Path, **kw: object) -> list[LogEntry]:
    return list(read_logs(path, **kw))  # type: ignore[arg-type]


def expected(
    path: Path,
    tail: int | None = None,
    since: int | None = None,
    streams: tuple[str, ...] = ("stdout", "stderr"),
    driver: str = modes.JSON_FILE,
) -> list[LogEntry]:
    """The forward read of everything, filtered here: what the old reader printed."""
    got = [e for e in whole(path, driver=driver) if e.stream in streams or driver == modes.FILE]
    got = [e for e in got if since is None or e.time_ns >= since]
    return got if tail is None else got[max(0, len(got) - tail) :] if tail else []


def write_pieces(path: Path, data: bytes, block: int) -> list[bytes]:
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        return list(backward.pieces(fd, len(data), block))
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\n",
        b"\n\n\n",
        b"no newline at all",
        b"one\ntwo\n",
        b"one\ntwo\nrest without newline",
        b"\nstarts with an empty line\n",
        b"x" * 1000 + b"\n" + b"y" * 777,  # a line far longer than the block
        b"a\n" * 300,
    ],
)
@pytest.mark.parametrize("block", [1, 2, 3, 7, 64, 4096])
def test_pieces_are_split_reversed(tmp_path: Path, data: bytes, block: int) -> None:
    assert write_pieces(tmp_path / "f", data, block) == data.split(b"\n")[::-1]


def test_pieces_random_blocks_and_lines(tmp_path: Path) -> None:
    rng = random.Random(37)
    for _ in range(200):
        data = b"".join(
            rng.choice([b"\n", b"", b"ab", b"c" * rng.randint(0, 300)]) for _ in range(60)
        )
        block = rng.randint(1, 200)
        assert write_pieces(tmp_path / "f", data, block) == data.split(b"\n")[::-1]


def test_pieces_read_only_the_blocks_asked_for(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"line\n" * 100_000)
    read: list[int] = []
    fd = os.open(path, os.O_RDONLY)
    real = os.pread

    def counting(fd: int, n: int, off: int) -> bytes:
        read.append(n)
        return real(fd, n, off)

    try:
        got = backward.pieces(fd, 500_000, 4096)
        os.pread = counting  # type: ignore[assignment]
        head = [next(got) for _ in range(11)]
    finally:
        os.pread = real
        os.close(fd)
    assert head == [b""] + [b"line"] * 10
    assert sum(read) == 4096


def test_pieces_stop_at_a_truncation(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"a\nb\n")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert list(backward.pieces(fd, 100, 4)) == [b""]  # the file is shorter than said
    finally:
        os.close(fd)


def rotated_log(path: Path, n: int = 400, max_size: int = 3000) -> None:
    with LogWriter(path, max_size=max_size, max_files=4) as w:
        for i in range(n):
            stream = "stderr" if i % 3 == 0 else "stdout"
            w.write(stream, f"line {i:05d}" + ("\n" if i % 7 else ""), T0 + i * 1000)


@pytest.mark.parametrize("tail", [None, 0, 1, 2, 10, 69, 70, 71, 150, 10_000])
@pytest.mark.parametrize("streams", [("stdout", "stderr"), ("stderr",), ("stdout",)])
def test_tail_matches_the_whole_read_across_rotated_files(
    tmp_path: Path, tail: int | None, streams: tuple[str, ...]
) -> None:
    path = tmp_path / "task.log"
    rotated_log(path)
    assert len(list(tmp_path.iterdir())) == 4  # the tails below cross file boundaries
    got = whole(path, tail=tail, streams=streams)
    assert got == expected(path, tail=tail, streams=streams)
    everything = expected(path, streams=streams)
    assert len(got) == (len(everything) if tail is None else min(tail, len(everything)))


@pytest.mark.parametrize("tail", [None, 0, 3, 100_000])
@pytest.mark.parametrize("back", [0, 1, 5, 60, 200, 400, 1000])
def test_since_matches_the_whole_read(tmp_path: Path, tail: int | None, back: int) -> None:
    path = tmp_path / "task.log"
    rotated_log(path)
    since = T0 + (400 - back) * 1000 + 1
    assert whole(path, since=since, tail=tail) == expected(path, tail=tail, since=since)
    assert whole(path, since=since, tail=tail, streams=["stderr"]) == expected(
        path, tail=tail, since=since, streams=("stderr",)
    )


def test_since_keeps_entries_stamped_slightly_out_of_order(tmp_path: Path) -> None:
    """The two streams' readers race for the file: a stamp can be a little older than
    the entry before it. The read back goes on past since by the slack."""
    path = tmp_path / "task.log"
    path.write_bytes(
        encode_entry("stdout", "old\n", T0)
        + encode_entry("stdout", "new\n", T0 + 10_000_000)
        + encode_entry("stderr", "raced\n", T0 + 9_000_000)  # stamped, then waited
        + encode_entry("stdout", "newer\n", T0 + 11_000_000)
    )
    since = T0 + 9_500_000
    assert [e.message for e in whole(path, since=since)] == ["new\n", "newer\n"]
    assert whole(path, since=since) == expected(path, since=since)


def test_edge_files(tmp_path: Path) -> None:
    """Empty files, a rotated file ending mid-line, torn and foreign lines, a
    current file that is missing or ends without a newline."""
    path = tmp_path / "task.log"
    e = lambda i: encode_entry("stdout", f"{i}\n", T0 + i)  # noqa: E731
    Path(f"{path}.3").write_bytes(b"")
    Path(f"{path}.2").write_bytes(e(1) + e(2) + b'{"log":"torn')
    Path(f"{path}.1").write_bytes(e(3) + b"not json\n\n" + e(4))
    for current in [None, b"", e(5) + b'{"log":"half wri', e(5) + e(6)]:
        if current is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(current)
        for tail in [None, 0, 1, 2, 3, 4, 5, 6, 7, 100]:
            assert whole(path, tail=tail) == expected(path, tail=tail), (current, tail)
    for name in os.listdir(tmp_path):
        (tmp_path / name).write_bytes(b"")
    assert whole(path, tail=10) == [] == whole(path, since=T0)


@pytest.mark.parametrize("tail", [None, 0, 1, 2, 3, 50])
@pytest.mark.parametrize("rest", [b"", b"no newline yet"])
def test_raw_tail(tmp_path: Path, tail: int | None, rest: bytes) -> None:
    path = tmp_path / "task.log"
    path.write_bytes(b"one\n\nthree\xff\n" + rest)
    got = whole(path, tail=tail, driver=modes.FILE)
    assert got == expected(path, tail=tail, driver=modes.FILE)
    assert whole(path, tail=tail, driver=modes.FILE, until=T0) == got  # every time is 0
    assert whole(path, tail=tail, driver=modes.FILE, until=-1) == []


@pytest.mark.parametrize("kw", [{"tail": 1}, {"tail": 3}, {"since": T0 + 2}])
def test_follow_goes_on_after_the_tail_with_a_torn_last_line(
    tmp_path: Path, kw: dict[str, int]
) -> None:
    """The current file ends mid-entry when the read starts: its end, once written,
    comes whole, after the tail, and nothing comes twice."""
    path = tmp_path / "task.log"
    last = encode_entry("stderr", "late\n", T0 + 4)
    path.write_bytes(
        b"".join(encode_entry("stdout", f"{i}\n", T0 + i) for i in range(4)) + last[:9]
    )
    head = expected(path, **kw)  # type: ignore[arg-type]
    assert head
    got, stop, t = follow_in_thread(path, **kw)
    try:
        wait_for(lambda: len(got) >= len(head), timeout=30, what="the tail")  # then at the end
        with path.open("ab") as f:
            f.write(last[9:] + encode_entry("stdout", "after\n", T0 + 5))
        wait_for(lambda: got and got[-1].message == "after\n", timeout=30, what="the line after")
    finally:
        stop.set()
        t.join(10)
    assert not t.is_alive()
    assert [e.message for e in got] == [e.message for e in head] + ["late\n", "after\n"]


def test_follow_raw_after_the_tail(tmp_path: Path) -> None:
    path = tmp_path / "task.log"
    path.write_bytes(b"a\nb\npart")
    got, stop, t = follow_in_thread(path, tail=2, driver=modes.FILE)
    try:
        wait_for(lambda: len(got) >= 2, timeout=30, what="the tail")
        with path.open("ab") as f:
            f.write(b" two\nc\n")
        wait_for(lambda: got and got[-1].message == "c\n", timeout=30, what="the line after")
    finally:
        stop.set()
        t.join(10)
    assert [e.message for e in got] == ["b\n", "part", " two\n", "c\n"]


def test_tail_reads_what_it_prints_not_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cost is structural: bytes read, counted, for 10 lines of an 8 MB log."""
    path = tmp_path / "task.log"
    with LogWriter(path, max_size=4 * 1024 * 1024, max_files=3) as w:
        line = "x" * 60 + "\n"
        for i in range(110_000):
            w.write("stdout", line, T0 + i * 1_000_000)  # 1 ms apart: the slack is 1000
    assert Path(f"{path}.1").exists()
    read: list[int] = []
    real_pread, real_read = os.pread, os.read

    def pread(fd: int, n: int, off: int) -> bytes:
        data = real_pread(fd, n, off)
        read.append(len(data))
        return data

    def plain_read(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        read.append(len(data))
        return data

    monkeypatch.setattr(os, "pread", pread)
    monkeypatch.setattr(os, "read", plain_read)
    assert len(whole(path, tail=10)) == 10
    assert len(whole(path, since=T0 + 109_990 * 1_000_000)) == 10
    assert len(whole(path, until=T0 + 109_900 * 1_000_000, tail=10)) == 10  # --until --tail
    monkeypatch.undo()
    assert sum(read) <= 6 * backward.BLOCK, sum(read)  # of 8 MB


def plain_decode(path: Path) -> list[LogEntry]:
    """Every entry of the rotated set, by hand: each file split at newlines, its
    unterminated rest dropped (neither reader takes it as an entry), each line decoded.
    Independent of read_logs, so the forward reader is checked by it too."""
    names = sorted(
        (p for p in path.parent.iterdir() if p.name.startswith(path.name + ".")),
        key=lambda p: -int(p.name.rsplit(".", 1)[1]),
    )
    got = []
    for name in [*names, path]:
        if not name.exists():
            continue
        for line in name.read_bytes().split(b"\n")[:-1]:
            if line and (entry := decode_entry(line)) is not None:
                got.append(entry)
    return got


def random_rotated_set(path: Path, rng: random.Random) -> list[int]:
    """A rotated set of random entries (long and empty messages, partial lines, foreign
    and empty lines), cut at random lines into up to five files, some of them empty,
    a rotated one or the current one maybe ending mid-entry. Returns the entries' times."""
    lines, times = [], []
    for i in range(rng.randrange(0, 120)):
        kind = rng.random()
        if kind < 0.05:
            lines.append(b"not an entry" if rng.random() < 0.5 else b"")
            continue
        size = rng.choice([0, 1, 5, 30, 90, 400, 3000])
        text = "".join(rng.choice('ab é\t"\\{}') for _ in range(size))
        text += "" if kind < 0.2 else "\n"  # a partial line now and then
        stream = "stderr" if rng.random() < 0.3 else "stdout"
        lines.append(encode_entry(stream, text, T0 + i * 1000).rstrip(b"\n"))
        times.append(T0 + i * 1000)
    cuts = sorted(rng.sample(range(len(lines) + 1), min(len(lines) + 1, rng.randrange(0, 5))))
    parts = [lines[a:b] for a, b in zip([0, *cuts], [*cuts, len(lines)], strict=True)]
    for n, part in enumerate(parts):
        data = b"".join(line + b"\n" for line in part)
        if n < len(parts) - 1 and rng.random() < 0.2:  # a rotated file ending mid-entry
            data += encode_entry("stderr", "cut\n", T0)[: rng.randrange(1, 30)]
        name = path if n == len(parts) - 1 else Path(f"{path}.{len(parts) - 1 - n}")
        name.write_bytes(data)
    if rng.random() < 0.3:  # the writer is mid-entry in the current file
        with path.open("ab") as f:
            f.write(encode_entry("stdout", "torn\n", T0 + 10**9)[: rng.randrange(1, 30)])
    return times


@pytest.mark.parametrize("seed", range(40))
def test_random_sets_with_small_blocks_match_a_plain_decode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Blocks of a few bytes, so entries span blocks and files; every tail and since
    gives what a decode of every line, filtered afterwards, gives."""
    rng = random.Random(seed)
    path = tmp_path / "task.log"
    times = random_rotated_set(path, rng)
    every = plain_decode(path)
    assert whole(path) == every
    real = backward.pieces
    block = rng.choice([1, 3, 16, 100, 1000])
    monkeypatch.setattr(backward, "pieces", lambda fd, size: real(fd, size, block))
    for streams in [("stdout", "stderr"), ("stderr",)]:
        kept = [e for e in every if e.stream in streams]
        for tail in {0, 1, 2, 7, len(kept) - 1, len(kept), len(kept) + 5}:
            if tail < 0:
                continue
            want = kept[max(0, len(kept) - tail) :] if tail else []
            assert whole(path, tail=tail, streams=streams) == want, (block, tail)
        for since in {T0 - 1, *rng.sample(times, min(3, len(times))), T0 + 10**12}:
            for tail in [None, 1, 4]:
                want = [e for e in kept if e.time_ns >= since]
                want = want if tail is None else want[max(0, len(want) - tail) :]
                got = whole(path, since=since, tail=tail, streams=streams)
                assert got == want, (block, since, tail)
        for until in {T0 - 1, *rng.sample(times, min(3, len(times))), T0 + 10**12}:
            for tail in [None, 0, 1, 4, len(kept) + 1]:
                for since in [None, T0 + 20_000]:  # logs --since --until --tail, by hand
                    want = [e for e in kept if e.time_ns <= until]
                    want = [e for e in want if since is None or e.time_ns >= since]
                    want = want[max(0, len(want) - tail) :] if tail else [] if tail == 0 else want
                    got = whole(path, since=since, until=until, tail=tail, streams=streams)
                    assert got == want, (block, since, until, tail)
