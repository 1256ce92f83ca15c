"""Namespace host files written by many threads at once (no root, no daemon)."""

from __future__ import annotations

import threading
from pathlib import Path

from ctrexec.net import hostfiles


def _ensure_all_at_once(base: Path, netns_path: str, count: int) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def writer(n: int) -> None:
        barrier.wait()
        try:
            hostfiles.ensure(netns_path, hostname=f"host{n}", addresses=[f"10.0.0.{n}"], base=base)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_sixteen_threads_converge_on_one_writers_files(tmp_path: Path) -> None:
    for round_ in range(20):  # a race needs a few tries to show
        base = tmp_path / f"r{round_}"
        assert _ensure_all_at_once(base, "/run/netns/cxt-shared", 16) == []
        files = hostfiles.HostFiles(base / "name-cxt-shared")
        hostname = files.hostname.read_text().strip()
        n = int(hostname.removeprefix("host"))
        assert files.hosts.read_text() == hostfiles.render_hosts(hostname, [f"10.0.0.{n}"])
        assert files.resolv_conf.exists()
        assert sorted(p.name for p in files.directory.iterdir()) == [
            "hostname",
            "hosts",
            "resolv.conf",
        ]  # no temp file left behind
        assert {p.stat().st_mode & 0o777 for p in files.directory.iterdir()} == {0o644}


def test_an_existing_file_is_kept(tmp_path: Path) -> None:
    first = hostfiles.ensure("/run/netns/cxt-keep", hostname="first", base=tmp_path)
    inode = first.hosts.stat().st_ino
    hostfiles.ensure("/run/netns/cxt-keep", hostname="second", base=tmp_path)
    assert first.hostname.read_text() == "first\n"
    assert first.hosts.stat().st_ino == inode  # what running tasks bind-mounted
