"""A registry that misbehaves on purpose: Python's http.server in a thread, on a
loopback address of the test's choice, each path answered by a function the test sets.

:class:`Server` records every request (path and headers), so a test can see where a
credential went. :func:`serve_image` puts one image's manifest and blobs under a
repository; the other answers (oversized, looping, lying) are the tests' own.
"""

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

Respond = Callable[["Handler"], None]


class Handler(http.server.BaseHTTPRequestHandler):
    server: _HTTPServer

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._answer()

    def do_HEAD(self) -> None:
        self._answer()

    def _answer(self) -> None:
        path = urlsplit(self.path).path
        self.server.owner.seen.append((path, dict(self.headers.items())))
        respond = self.server.owner.routes.get(path)
        if respond is None:
            self.send(404, b'{"errors":[{"code":"NOT_FOUND","message":"no such path"}]}')
        else:
            respond(self)

    def send(
        self,
        status: int,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        *,
        length: int | None = None,
    ) -> None:
        """Answer; ``length`` (when not None) is the Content-Length sent, true or not;
        -1 sends none (the body then ends when the connection closes: HTTP/1.0)."""
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        declared = len(body) if length is None else length
        if declared >= 0:
            self.send_header("Content-Length", str(declared))
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(body)


class _HTTPServer(http.server.ThreadingHTTPServer):
    owner: Server


class Server:
    """One HTTP(S) server on ``address``; use as a context manager."""

    def __init__(self, address: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> None:
        self.routes: dict[str, Respond] = {}
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.httpd = _HTTPServer((address, 0), Handler)
        self.httpd.owner = self
        self.scheme = "http"
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
            self.scheme = "https"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def host(self) -> str:
        addr, port = self.httpd.server_address[:2]
        return f"{addr!s}:{port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}"

    def headers_of(self, prefix: str) -> list[dict[str, str]]:
        return [h for p, h in self.seen if p.startswith(prefix)]

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


def blob_route(data: bytes, **send: Any) -> Respond:
    return lambda h: h.send(200, data, {"Content-Type": "application/octet-stream"}, **send)


def serve_image(
    server: Server,
    repo: str,
    manifest: tuple[str, str, bytes],
    blobs: Mapping[str, bytes],
    *,
    tag: str = "v1",
) -> None:
    """The manifest (media type, digest, bytes) by tag and digest, the blobs by digest."""
    media_type, digest, data = manifest
    headers = {"Content-Type": media_type, "Docker-Content-Digest": digest}
    for ref in (tag, digest):
        server.routes[f"/v2/{repo}/manifests/{ref}"] = lambda h: h.send(200, data, headers)
    for d, blob in blobs.items():
        server.routes.setdefault(f"/v2/{repo}/blobs/{d}", blob_route(blob))


def guarded(respond: Respond, allowed: Callable[[str], bool], challenge: str) -> Respond:
    """``respond`` only for a request whose Authorization ``allowed`` accepts, else 401."""

    def answer(h: Handler) -> None:
        if allowed(h.headers.get("Authorization", "")):
            respond(h)
        else:
            h.send(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}', {"WWW-Authenticate": challenge})

    return answer
