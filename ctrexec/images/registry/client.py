"""The OCI distribution API for one repository: manifests and blobs, with auth.

The seam to HTTP: urllib3 is imported here and nowhere else, and its errors become
ctrexec's (a connection or read failure: Unavailable; 401/403: PermissionDenied; 404:
NotFound; other statuses: RegistryError), each chained. Endpoints come from
:mod:`ctrexec.images.registry.hosts` and are tried in order; a 401 is answered from its
``WWW-Authenticate`` challenge once per endpoint, and tokens are kept per scope.
"""

from __future__ import annotations

import errno
import json
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urljoin, urlsplit

import urllib3
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    InsecureRequestWarning,
    NameResolutionError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
    SSLError,
)

from ctrexec import errors
from ctrexec.containerd import content
from ctrexec.containerd.content import Descriptor
from ctrexec.images.registry import auth, hosts
from ctrexec.images.registry.auth import Credentials
from ctrexec.images.registry.hosts import RegistryHost

if TYPE_CHECKING:
    from ctrexec.paths import StrPath

MANIFEST_ACCEPT = ", ".join(
    [
        content.MT_OCI_INDEX,
        content.MT_DOCKER_MANIFEST_LIST,
        content.MT_OCI_MANIFEST,
        content.MT_DOCKER_MANIFEST,
    ]
)
#: A request body, made again for each request sent (a retry sends it whole).
Body = Callable[[], bytes | Iterable[bytes]]
_CHUNK = 1024 * 1024
_TIMEOUT = urllib3.Timeout(connect=30.0, read=120.0)
_USER_AGENT = "ctrexec"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_TOKEN_BYTES = 1024 * 1024


#: What an errno behind a failed connection means, in the words of ``curl`` and docker.
_CONNECT_ERRNOS = {
    errno.ECONNREFUSED: "connection refused",
    errno.ENETUNREACH: "network unreachable",
    errno.EHOSTUNREACH: "host unreachable",
    errno.ETIMEDOUT: "connection timed out",
    errno.ECONNRESET: "connection reset",
}


def _why(exc: HTTPError) -> str:
    """What went wrong, in a user's words: urllib3's text names its connection object
    and retry machinery, which a user never asked about."""
    if isinstance(exc, NameResolutionError):
        return "cannot resolve its host name (no network, or no DNS server answering?)"
    if isinstance(exc, NewConnectionError):
        cause = exc.__cause__ or exc.__context__
        code = cause.errno if isinstance(cause, OSError) else None
        if code in _CONNECT_ERRNOS:
            return _CONNECT_ERRNOS[code]
        if isinstance(cause, OSError) and cause.strerror:
            return f"cannot connect: {cause.strerror.lower()}"
    if isinstance(exc, ConnectTimeoutError):
        return "connection timed out"
    if isinstance(exc, ReadTimeoutError):
        return "no answer in time (read timed out)"
    if isinstance(exc, SSLError):
        return f"TLS handshake failed: {exc.__cause__ or exc}"
    if isinstance(exc, ProtocolError):
        return "connection broken off"
    text = str(exc)
    return text.split(">: ", 1)[1] if text.startswith("<") and ">: " in text else text


def _pool(host: RegistryHost, maxsize: int) -> urllib3.PoolManager:
    kwargs: dict[str, Any] = {"maxsize": maxsize, "timeout": _TIMEOUT, "retries": False}
    if host.skip_verify:
        kwargs["cert_reqs"] = "CERT_NONE"
        # asked for in hosts.toml: not a warning on stderr for each request, which
        # would break every command's one-line error
        warnings.filterwarnings("ignore", category=InsecureRequestWarning)
    elif host.ca:
        kwargs["ca_certs"] = host.ca[0]
    return urllib3.PoolManager(**kwargs)


def _declared_length(resp: urllib3.BaseHTTPResponse) -> int:
    """The response's Content-Length, -1 when it has none (or not a number, or it
    counts an encoding urllib3 undoes)."""
    if resp.headers.get("Content-Encoding", "identity") != "identity":
        return -1
    try:
        return int(resp.headers.get("Content-Length", "-1"))
    except ValueError:
        return -1


class Repository:
    """One repository (``library/busybox``) of one registry (``docker.io``)."""

    def __init__(
        self,
        domain: str,
        path: str,
        hosts: Sequence[RegistryHost],
        *,
        credentials: Credentials | None = None,
        parallel: int = 4,
    ) -> None:
        self.domain = domain
        self.path = path
        self.hosts = list(hosts)
        self.credentials = credentials
        self._pools = {h.api: _pool(h, parallel) for h in self.hosts}
        self._auth: dict[str, str] = {}  # endpoint -> Authorization value
        self._lock = threading.Lock()

    def close(self) -> None:
        for pool in self._pools.values():
            pool.clear()

    # -- requests ---------------------------------------------------------------------------

    def _send(
        self,
        host: RegistryHost,
        method: str,
        url: str,
        headers: dict[str, str],
        where: str = "",
        *,
        body: Body | None = None,
    ) -> urllib3.BaseHTTPResponse:
        """One request and its redirects, followed here and not by urllib3: at most
        hosts.MAX_REDIRECTS, none down from https, and a credential header only to the
        origin it was made for (once dropped, it stays dropped). ``body`` is called for
        each request sent, so a redirect or an auth retry sends the whole body again."""
        where = where or f"registry {host.origin}"
        for _ in range(hosts.MAX_REDIRECTS + 1):
            try:
                resp = self._pools[host.api].request(
                    method,
                    url,
                    headers=headers,
                    body=body() if body is not None else None,
                    preload_content=False,
                    redirect=False,
                )
            except HTTPError as exc:
                raise errors.Unavailable(f"{where}: {_why(exc)}") from exc
            location = resp.headers.get("Location")
            if resp.status not in _REDIRECTS or not location:
                return resp
            resp.drain_conn()
            target = hosts.redirect_target(url, location, where)
            headers = hosts.redirect_headers(headers, url, target)
            url, method = target, ("GET" if resp.status == 303 else method)
        raise errors.RegistryRefused(
            f"{where}: more than {hosts.MAX_REDIRECTS} redirects (a redirect loop?)"
        )

    def request(
        self,
        host: RegistryHost,
        method: str,
        tail: str,
        headers: dict[str, str] | None = None,
        *,
        body: Body | None = None,
        url: str = "",
    ) -> urllib3.BaseHTTPResponse:
        """``method <api>/<repo>/<tail>`` (or ``url``, an upload's location), answering
        one auth challenge; the response is open (the caller reads or releases it).
        Statuses >= 400 raise."""
        url = url or (f"{host.api}/{self.path}/{tail}" if tail else f"{host.api}/")
        base = {"User-Agent": _USER_AGENT, **host.headers, **(headers or {})}
        with self._lock:
            cached = self._auth.get(host.api)
        resp = self._send(
            host,
            method,
            url,
            {**base, **({"Authorization": cached} if cached else {})},
            body=body,
        )
        if resp.status == 401:
            challenge = resp.headers.get("WWW-Authenticate", "")
            resp.drain_conn()
            value = self._authorize(host, challenge)
            resp = self._send(host, method, url, {**base, "Authorization": value}, body=body)
        if resp.status >= 400:
            raise self._status_error(host, resp, url)
        return resp

    def _status_error(
        self, host: RegistryHost, resp: urllib3.BaseHTTPResponse, url: str
    ) -> errors.CtrexecError:
        detail = ""
        try:
            body = json.loads(resp.read(64 * 1024) or b"{}")
            first = (body.get("errors") or [{}])[0]
            detail = f": {first.get('code', '')} {first.get('message', '')}".rstrip()
        except (ValueError, AttributeError, HTTPError):
            pass
        finally:
            resp.release_conn()
        where = f"registry {host.origin}"
        if resp.status == 401:
            hint = f"; log in with: ctrexec login {self.domain}"
            return errors.PermissionDenied(f"{where}: authentication required{detail}{hint}")
        if resp.status == 403:
            return errors.PermissionDenied(f"{where}: access to {self.path} denied{detail}")
        if resp.status == 404:
            return errors.NotFound(
                f"{where}: {url.rsplit('/', 2)[-2:][-1]} not found in {self.path}{detail}"
            )
        return errors.RegistryError(f"{where}: HTTP {resp.status}{detail}", status=resp.status)

    def _authorize(self, host: RegistryHost, header: str) -> str:
        for ch in auth.parse_challenges(header):
            if ch.scheme == "basic":
                if self.credentials is None:
                    break
                value = self.credentials.basic
            elif ch.scheme == "bearer":
                value = "Bearer " + self._token(host, ch.params)
            else:
                continue
            with self._lock:
                self._auth[host.api] = value
            return value
        raise errors.PermissionDenied(
            f"registry {host.origin}: authentication required; "
            f"log in with: ctrexec login {self.domain}"
        )

    def _token(self, host: RegistryHost, params: dict[str, str]) -> str:
        realm = params.get("realm", "")
        if not realm.startswith(("https://", "http://")):
            raise errors.RegistryError(f"registry {host.origin}: bearer challenge has no realm")
        scope = params.get("scope") or (f"repository:{self.path}:pull" if self.path else "")
        query = {"scope": scope} if scope else {}
        if params.get("service"):
            query["service"] = params["service"]
        headers = {"User-Agent": _USER_AGENT}
        if self.credentials is not None and self.credentials.username != "<token>":
            if not auth.realm_may_have_credentials(host.api, realm):
                raise errors.PermissionDenied(
                    f"registry {host.origin}: its token server {realm} is plain HTTP;"
                    " credentials for an HTTPS registry are not sent in clear"
                )
            headers["Authorization"] = self.credentials.basic
        url = f"{realm}{'&' if '?' in realm else '?'}{urlencode(query)}"
        resp = self._send(host, "GET", url, headers, where=f"token server {realm}")
        try:
            body = resp.read(_TOKEN_BYTES + 1)
        except HTTPError as exc:
            raise errors.Unavailable(f"token server {realm}: {_why(exc)}") from exc
        finally:
            resp.release_conn()
        if len(body) > _TOKEN_BYTES:
            raise errors.RegistryError(f"token server {realm}: answer is over 1 MiB")
        if resp.status in (401, 403):
            raise errors.PermissionDenied(f"token server {realm}: credentials refused")
        if resp.status != 200:
            raise errors.RegistryError(
                f"token server {realm}: HTTP {resp.status}", status=resp.status
            )
        try:
            answer = json.loads(body)
            return str(answer.get("token") or answer["access_token"])
        except (ValueError, KeyError, AttributeError):
            raise errors.RegistryError(f"token server {realm}: answer has no token") from None

    def _each_host(self, capability: str) -> Iterator[RegistryHost]:
        hosts = [h for h in self.hosts if capability in h.capabilities] or self.hosts
        yield from hosts

    def _try_hosts(
        self, capability: str, method: str, tail: str, headers: dict[str, str] | None = None
    ) -> tuple[RegistryHost, urllib3.BaseHTTPResponse]:
        """The first endpoint that answers; a mirror's failure falls through to the next,
        the last one's error is raised."""
        hosts = list(self._each_host(capability))
        for i, host in enumerate(hosts):
            try:
                return host, self.request(host, method, tail, headers)
            except (errors.Unavailable, errors.NotFound, errors.RegistryError):
                if i == len(hosts) - 1:
                    raise
        raise errors.Unavailable(f"registry {self.domain}: no endpoint")  # pragma: no cover

    # -- the API ------------------------------------------------------------------------------

    def ping(self) -> None:
        """``GET /v2/`` with auth: how ``login`` checks credentials."""
        host = self.hosts[-1]
        resp = self.request(host, "GET", "")
        resp.drain_conn()

    def manifest(self, reference: str, *, resolve: bool) -> tuple[Descriptor, bytes]:
        """A manifest or index by tag or digest, read whole (bounded) and checked: by
        digest against the digest asked for, by tag against Docker-Content-Digest."""
        _, resp = self._try_hosts(
            "resolve" if resolve else "pull",
            "GET",
            f"manifests/{reference}",
            {"Accept": MANIFEST_ACCEPT},
        )
        limit = content.MAX_METADATA_BYTES
        too_large = errors.ResourceExhausted(
            f"registry {self.domain}: manifest {reference} is larger than {limit >> 20} MiB:"
            " refused"
        )
        if _declared_length(resp) > limit:
            resp.close()  # not read: the connection cannot serve another request
            raise too_large
        try:
            data = resp.read(limit + 1)
        except HTTPError as exc:
            raise errors.Unavailable(f"registry {self.domain}: {_why(exc)}") from exc
        finally:
            resp.release_conn()
        if len(data) > limit:
            raise too_large
        expected = reference if ":" in reference else resp.headers.get("Docker-Content-Digest", "")
        algorithm = expected.split(":", 1)[0] if expected else "sha256"
        got = content.digest_of(data, algorithm if algorithm in ("sha256", "sha512") else "sha256")
        if expected and got != expected:
            raise errors.DigestMismatch(
                f"manifest {reference}: got digest {got}, expected {expected}"
            )
        media_type = (resp.headers.get("Content-Type") or "").split(";", 1)[0].strip()
        obj = content.load_json(data, f"manifest {reference}")
        inner = obj.get("mediaType")
        if isinstance(inner, str) and inner:
            media_type = inner
        return Descriptor(media_type, got, len(data)), data

    def blob(self, desc: Descriptor, offset: int = 0) -> Iterator[bytes]:
        """The blob's bytes from ``offset`` (a Range request; a server that ignores it
        is skipped forward). The content store verifies the digest at commit."""
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        _, resp = self._try_hosts("pull", "GET", f"blobs/{desc.digest}", headers)
        length = _declared_length(resp)
        want = desc.size - offset if resp.status == 206 else desc.size
        if length >= 0 and length != want:
            resp.close()
            raise errors.DigestMismatch(
                f"registry {self.domain}: blob {desc.digest} is {length} bytes there,"
                f" the manifest says {want}"
            )
        try:
            skip = offset if (offset and resp.status != 206) else 0
            for chunk in resp.stream(_CHUNK):
                cut = min(skip, len(chunk))
                skip -= cut
                if cut < len(chunk):
                    yield chunk[cut:] if cut else chunk
        except HTTPError as exc:
            resp.close()
            raise errors.Unavailable(
                f"registry {self.domain}: blob {desc.digest}: {_why(exc)}"
            ) from exc
        except BaseException:
            resp.close()  # unread bytes: the connection cannot serve another request
            raise
        resp.release_conn()

    def blob_bytes(self, desc: Descriptor) -> bytes:
        """A small blob (a config) whole, bounded by the metadata limit."""
        if desc.size > content.MAX_METADATA_BYTES:
            raise errors.ResourceExhausted(f"blob {desc.digest} is too large to read whole")
        return b"".join(self.blob(desc))

    # -- pushing ------------------------------------------------------------------------------

    def has_blob(self, digest: str) -> bool:
        """``HEAD blobs/<digest>`` on the push endpoint: a blob it has is not sent again."""
        host = next(self._each_host("push"))
        try:
            resp = self.request(host, "HEAD", f"blobs/{digest}")
        except errors.NotFound:
            return False
        resp.drain_conn()
        return True

    def upload_blob(self, desc: Descriptor, chunks: Body) -> None:
        """A blob in one piece: ``POST blobs/uploads/`` opens an upload, ``PUT <location>
        ?digest=`` sends the bytes and closes it (the distribution spec's monolithic
        upload). The registry checks the digest; its refusal raises."""
        host = next(self._each_host("push"))
        resp = self.request(host, "POST", "blobs/uploads/", {"Content-Length": "0"})
        location = resp.headers.get("Location", "")
        resp.drain_conn()
        if not location:
            raise errors.RegistryError(f"registry {host.origin}: upload has no Location")
        target = urljoin(f"{host.api}/{self.path}/blobs/uploads/", location)
        if urlsplit(target).netloc != urlsplit(host.api).netloc:
            # a credential goes only to the origin it was made for (as _send's redirects)
            raise errors.RegistryRefused(
                f"registry {host.origin}: upload location {target} is on another host"
            )
        target += ("&" if "?" in target else "?") + urlencode({"digest": desc.digest})
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(desc.size)}
        resp = self.request(host, "PUT", "", headers, body=chunks, url=target)
        resp.drain_conn()

    def put_manifest(self, reference: str, desc: Descriptor, data: bytes) -> None:
        """``PUT manifests/<tag or digest>`` with the document's own media type; the
        registry's Docker-Content-Digest, when it sends one, must be ``desc``'s."""
        host = next(self._each_host("push"))
        headers = {"Content-Type": desc.media_type, "Content-Length": str(len(data))}
        resp = self.request(host, "PUT", f"manifests/{reference}", headers, body=lambda: data)
        resp.drain_conn()
        said = resp.headers.get("Docker-Content-Digest", "")
        if said and said != desc.digest:
            raise errors.DigestMismatch(
                f"registry {self.domain}: manifest {reference} stored as {said}, not {desc.digest}"
            )


def login(
    domain: str,
    credentials: Credentials,
    *,
    plain_http: bool = False,
    hosts_dir: StrPath | None = None,
) -> str:
    """docker's ``login``: check ``credentials`` against the registry first (a refused
    login stores nothing), then keep them where docker would, for later pulls and
    pushes. Returns where (a credential helper's name, else the config file);
    ``hosts_dir``: the registry hosts.toml directory, as a pull's."""
    directory = None if hosts_dir is None else Path(hosts_dir)
    endpoints = hosts.registry_hosts(domain, plain_http=plain_http, directory=directory)
    repo = Repository(domain, "", endpoints, credentials=credentials)
    try:
        repo.ping()
    finally:
        repo.close()
    return auth.store(domain, credentials)
