"""A real registry for the pull tests: Debian's docker-registry on 127.0.0.1.

:class:`Registry` runs ``docker-registry serve`` on a port it picks, with its data in
a directory the test owns, optionally behind htpasswd basic auth; it is stopped (or
killed, for the interruption test) by its pid. :func:`push` copies an OCI archive into
it with skopeo. :class:`BlobProxy` sits in front and holds back, or corrupts, one blob
(:class:`CorruptingProxy`).
"""

from __future__ import annotations

import http.client
import http.server
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REGISTRY_BIN = "docker-registry"
USER, PASSWORD = "ctrexec", "s3cret-pass"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Registry:
    def __init__(self, base: Path, *, auth: bool = False) -> None:
        self.base = base
        self.port = free_port()
        self.auth = auth
        self.proc: subprocess.Popen[bytes] | None = None
        (base / "data").mkdir(parents=True, exist_ok=True)
        config = [
            "version: 0.1",
            "log:",
            "  level: error",
            "storage:",
            "  filesystem:",
            f"    rootdirectory: {base / 'data'}",
            "  delete:",
            "    enabled: true",
            "http:",
            f"  addr: 127.0.0.1:{self.port}",
        ]
        if auth:
            htpasswd = base / "htpasswd"
            out = subprocess.run(
                ["htpasswd", "-Bbn", USER, PASSWORD], check=True, capture_output=True, text=True
            ).stdout
            htpasswd.write_text(out)
            config += ["auth:", "  htpasswd:", "    realm: ctrexec-test", f"    path: {htpasswd}"]
        (base / "config.yml").write_text("\n".join(config) + "\n")

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        log = (self.base / "registry.log").open("ab")
        self.proc = subprocess.Popen(
            [REGISTRY_BIN, "serve", str(self.base / "config.yml")], stdout=log, stderr=log
        )
        log.close()
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://{self.host}/v2/", timeout=2).close()
                return
            except urllib.error.HTTPError as exc:
                if exc.code == 401:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"docker-registry did not start: {self.base / 'registry.log'}")
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        self.proc.wait(timeout=30)
        self.proc = None

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


def push(archive: Path, dest: str, *, creds: bool = False) -> None:
    """``skopeo copy --all`` of the archive's image (an index keeps every platform)."""
    argv = ["skopeo", "copy", "--all", "--dest-tls-verify=false", "--quiet"]
    if creds:
        argv += ["--dest-creds", f"{USER}:{PASSWORD}"]
    subprocess.run(
        [*argv, f"oci-archive:{archive}", f"docker://{dest}"],
        check=True,
        capture_output=True,
        env={**os.environ, "TMPDIR": str(archive.parent)},
    )


class BlobProxy:
    """HTTP on 127.0.0.1 that forwards to ``upstream``. A GET of the blob ``digest``
    waits for ``release`` (when given; bounded) before it is forwarded, and with
    ``corrupt`` its body has the middle byte flipped; every other request passes
    through untouched. ``asked`` is set once that blob has been asked for."""

    def __init__(
        self,
        upstream: str,
        digest: str,
        *,
        corrupt: bool = False,
        release: threading.Event | None = None,
    ) -> None:
        self.upstream = upstream
        self.digest = digest
        self.corrupt = corrupt
        self.release = release
        self.asked = threading.Event()
        self.corrupted = 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                proxy.forward(self, "GET")

            def do_HEAD(self) -> None:
                proxy.forward(self, "HEAD")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def forward(self, handler: http.server.BaseHTTPRequestHandler, method: str) -> None:
        ours = method == "GET" and handler.path.endswith(f"/blobs/{self.digest}")
        if ours:
            self.asked.set()
            if self.release is not None:
                # bounded, and longer than any test waits before it releases
                self.release.wait(300)
        conn = http.client.HTTPConnection(self.upstream, timeout=30)
        headers = {k: v for k, v in handler.headers.items() if k.lower() != "host"}
        conn.request(method, handler.path, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        if ours and self.corrupt and body:
            mid = len(body) // 2
            body = body[:mid] + bytes([body[mid] ^ 0xFF]) + body[mid + 1 :]
            self.corrupted += 1
        handler.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                handler.send_header(k, v)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if method == "GET":
            handler.wfile.write(body)
        conn.close()

    def __enter__(self) -> BlobProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.release is not None:
            self.release.set()  # a held request must not outlive the test
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


class CorruptingProxy(BlobProxy):
    """A :class:`BlobProxy` that flips the middle byte of the blob ``digest``'s body."""

    def __init__(self, upstream: str, digest: str) -> None:
        super().__init__(upstream, digest, corrupt=True)
