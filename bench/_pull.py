"""The pull row's machinery, shared by bench/pull and bench/run: a local registry holding
the bench image set, and interleaved rounds of ``ctrexec pull -q`` against ``ctr images
pull --plain-http`` of it into fresh namespaces of one containerd.

The image set is the busybox test image with ``layers`` extra layers of ``layer_mib``
MiB of incompressible data (``scripts/build-test-image --extra-layers``), pushed with
``skopeo`` to Debian's ``docker-registry`` on 127.0.0.1 (a free port, data in the
caller's directory). Both commands fetch, verify, store and unpack every layer. After
each pull the image is removed, containerd's GC run and the namespace removed, and the
blob directory is checked to be back where it was, so every round downloads everything.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from _common import BenchError

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LAYERS = 4
DEFAULT_LAYER_MIB = 16


@dataclass(frozen=True)
class ImageSet:
    ref: str  # HOST:PORT/bench:latest on the local registry
    target: str  # the manifest digest build-test-image reported
    layers: int
    layer_mib: int

    def describe(self) -> str:
        return (
            f"{self.layers} x {self.layer_mib} MiB extra layers + busybox layer "
            f"(~{self.layers * self.layer_mib + 1} MiB)"
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_registry(base: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    config = base / "registry.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {base / 'registry'}\nhttp:\n  addr: 127.0.0.1:{port}\n"
    )
    proc = subprocess.Popen(
        ["docker-registry", "serve", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2).close()
            return proc, f"127.0.0.1:{port}"
        except (OSError, urllib.error.URLError):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise BenchError("docker-registry did not start") from None
            time.sleep(0.05)


@contextlib.contextmanager
def registry_with_image(base: Path, layers: int, layer_mib: int) -> Iterator[ImageSet]:
    """The bench image set on a local registry, stopped (by its pid) on exit."""
    archive = base / "pull-image.tar"
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build-test-image"), "--out", str(archive),
         "--extra-layers", str(layers), "--extra-layer-size", str(layer_mib << 20)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    target = str(json.loads(out.stdout)["target"])
    proc, host = start_registry(base)
    try:
        ref = f"{host}/bench:latest"
        subprocess.run(
            ["skopeo", "copy", "--dest-tls-verify=false", "--quiet",
             f"oci-archive:{archive}", f"docker://{ref}"],
            check=True, env={**os.environ, "TMPDIR": str(base)},
        )  # fmt: skip
        archive.unlink()
        yield ImageSet(ref=ref, target=target, layers=layers, layer_mib=layer_mib)
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def blob_bytes(root: Path) -> int:
    blobs = root / "io.containerd.content.v1.content" / "blobs"
    return sum(p.stat().st_size for p in blobs.rglob("*") if p.is_file()) if blobs.is_dir() else 0


def _timed(argv: Sequence[str], env: dict[str, str] | None) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(
        list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False
    )
    if proc.returncode != 0:
        raise BenchError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr!r}")
    return time.perf_counter() - t0


def clean(address: str, namespace: str, ref: str) -> None:
    """Remove the image and collect its content and snapshots now, then the namespace."""
    from ctrexec import Client, remove_image

    with Client.connect(address, namespace=namespace) as c:
        remove_image(c, ref, force=True, sync=True)
        c.delete_lease(c.create_lease().id, sync=True)
    subprocess.run(
        ["ctr", "--address", address, "namespaces", "remove", namespace],
        check=True,
        capture_output=True,
    )


def rounds(
    address: str,
    *,
    root: Path,
    image: ImageSet,
    n: int,
    ctrexec: Sequence[str],
    env: dict[str, str] | None = None,
) -> dict[str, list[float]]:
    """``n`` rounds of both pulls, in turn (the order swapped every round); seconds.

    ``root`` is the containerd's root directory (its blobs are checked after each
    round); ``ctrexec`` the command that runs ctrexec (a script or ``python -m``)."""
    baseline = blob_bytes(root)
    times: dict[str, list[float]] = {"ctrexec": [], "ctr": []}
    for i in range(n):
        for who in ("ctrexec", "ctr") if i % 2 == 0 else ("ctr", "ctrexec"):
            ns = f"bench-pull-{who}-{i}"
            if who == "ctrexec":
                argv = [*ctrexec, "pull", "-q", "--address", address, "-n", ns, image.ref]
            else:
                argv = ["ctr", "--address", address, "-n", ns, "images", "pull",
                        "--plain-http", image.ref]  # fmt: skip
            times[who].append(_timed(argv, env))
            clean(address, ns, image.ref)
            left = blob_bytes(root)
            if left != baseline:
                raise BenchError(f"{left - baseline} blob bytes left after GC ({who}, round {i})")
    return times
