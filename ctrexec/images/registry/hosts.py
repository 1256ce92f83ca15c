"""Where a registry's API is served: mirrors, plain HTTP, TLS, in containerd's hosts.toml.

One file per registry host, in the format containerd's CRI and ``ctr --hosts-dir`` read
(``docs/registry.md`` describes it)::

    /etc/ctrexec/certs.d/<host[:port]>/hosts.toml     ($CTREXEC_REGISTRY_CONFIG: the dir)

    server = "https://registry.example.com"
    [host."http://mirror.local:5000"]
      capabilities = ["pull", "resolve"]
      skip_verify = false
      ca = "/etc/ctrexec/certs.d/registry.example.com/ca.crt"
      [host."http://mirror.local:5000".header]
        x-custom = "1"

The ``host`` entries are tried in file order, then ``server``. Without a file the
server is ``https://<host>`` (``https://registry-1.docker.io`` for docker.io), or
``http://`` for a localhost-style host (``localhost``, ``127.0.0.0/8``, ``::1``) or
when plain HTTP is asked for. A host URL with no path gets ``/v2``; with
``override_path = true`` its path is used as it is.
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import attrs

from ctrexec import errors

CONFIG_DIR_ENV = "CTREXEC_REGISTRY_CONFIG"
DEFAULT_CONFIG_DIR = "/etc/ctrexec/certs.d"
DOCKER_HUB = "docker.io"
DOCKER_HUB_SERVER = "https://registry-1.docker.io"
ALL_CAPABILITIES = frozenset({"pull", "resolve", "push"})
#: Redirects followed for one request: Go's http.Client's bound, which docker and
#: containerd use. A registry that sends more is in a loop.
MAX_REDIRECTS = 10
#: Headers that carry a credential: never sent to another origin than the one they
#: were made for (urllib3's and Go's rule for a redirect).
CREDENTIAL_HEADERS = ("Authorization", "Cookie", "Proxy-Authorization")


@attrs.frozen
class RegistryHost:
    """One endpoint serving a registry's API."""

    #: ``scheme://host[:port]/path`` where ``<path>/<repo>/manifests/...`` is served.
    api: str
    capabilities: frozenset[str] = ALL_CAPABILITIES
    skip_verify: bool = False
    ca: tuple[str, ...] = ()
    headers: Mapping[str, str] = attrs.field(factory=dict)

    @property
    def origin(self) -> str:
        parts = urlsplit(self.api)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def plain_http(self) -> bool:
        return self.api.startswith("http://")


def origin(url: str) -> str:
    """``scheme://host:port`` (the port spelled out): what "another host" means for a
    redirect or a token realm. A different port is another host (urllib3's rule;
    Go's compares host names only, the stricter one is kept)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


def redirect_target(url: str, location: str, where: str) -> str:
    """Where a redirect from ``url`` goes; RegistryRefused for one that is not http(s)
    or goes from https down to http (docker follows those; a registry reached over TLS
    does not hand its blobs to a plain-text host here)."""
    target = urljoin(url, location)
    scheme = urlsplit(target).scheme
    if scheme not in ("http", "https") or not urlsplit(target).netloc:
        raise errors.RegistryRefused(f"{where}: redirect to {target!r} is not an http(s) URL")
    if url.startswith("https://") and scheme == "http":
        raise errors.RegistryRefused(f"{where}: redirect from HTTPS down to {target}: refused")
    return target


def redirect_headers(headers: Mapping[str, str], url: str, target: str) -> dict[str, str]:
    """The headers to send on to ``target``: the credentials only to the same origin."""
    if origin(url) == origin(target):
        return dict(headers)
    drop = {h.lower() for h in CREDENTIAL_HEADERS}
    return {k: v for k, v in headers.items() if k.lower() not in drop}


def is_local(domain: str) -> bool:
    """A loopback host, served over plain HTTP by default (docker and containerd's
    ``ctr`` treat it as insecure too)."""
    host = domain.rsplit(":", 1)[0] if not domain.endswith("]") else domain
    host = host.strip("[]")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def config_dir() -> Path:
    return Path(os.environ.get(CONFIG_DIR_ENV) or DEFAULT_CONFIG_DIR)


def _api(url: str, override_path: bool, where: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise errors.InvalidArgument(f"{where}: {url!r} is not an http(s) URL")
    path = parts.path.rstrip("/")
    if not override_path:
        path = path if path.endswith("/v2") else f"{path}/v2"
    return f"{parts.scheme}://{parts.netloc}{path}"


def _strs(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise errors.InvalidArgument(f"{what} must be a string or a list of strings")
    return tuple(value)


def _host_entry(url: str, table: Mapping[str, Any], where: str) -> RegistryHost:
    if not isinstance(table, dict):
        raise errors.InvalidArgument(f"{where}: host {url!r} is not a table")
    caps = frozenset(_strs(table.get("capabilities", sorted(ALL_CAPABILITIES)), where))
    if not caps <= ALL_CAPABILITIES:
        raise errors.InvalidArgument(f"{where}: unknown capabilities {sorted(caps)}")
    skip = table.get("skip_verify", False)
    headers = table.get("header") or {}
    if not isinstance(skip, bool) or not isinstance(headers, dict):
        raise errors.InvalidArgument(f"{where}: skip_verify must be true/false, header a table")
    return RegistryHost(
        api=_api(url, bool(table.get("override_path", False)), where),
        capabilities=caps,
        skip_verify=skip,
        ca=_strs(table.get("ca"), f"{where}: ca"),
        headers={str(k): ", ".join(_strs(v, f"{where}: header {k}")) for k, v in headers.items()},
    )


def _default_server(domain: str, plain_http: bool) -> str:
    if domain == DOCKER_HUB:
        return DOCKER_HUB_SERVER
    return f"{'http' if plain_http or is_local(domain) else 'https'}://{domain}"


def parse_hosts_toml(
    text: str, domain: str, *, plain_http: bool = False, where: str = ""
) -> list[RegistryHost]:
    """The endpoints of ``domain`` that a hosts.toml lists, mirrors first."""
    where = where or f"hosts.toml of {domain}"
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise errors.InvalidArgument(f"{where}: {exc}") from None
    out = [_host_entry(url, table, where) for url, table in (doc.get("host") or {}).items()]
    server = doc.get("server") or _default_server(domain, plain_http)
    if not isinstance(server, str):
        raise errors.InvalidArgument(f"{where}: server must be a URL string")
    top = {k: v for k, v in doc.items() if k not in ("server", "host")}
    out.append(_host_entry(server, top, where))
    return out


def registry_hosts(
    domain: str, *, plain_http: bool = False, directory: Path | None = None
) -> list[RegistryHost]:
    """The endpoints to try for ``domain``, from its hosts.toml (or the ``_default``
    one) in ``directory`` (default: :func:`config_dir`), else the server alone."""
    base = directory or config_dir()
    for name in (domain, domain.replace(":", "_"), "_default"):
        path = base / name / "hosts.toml"
        try:
            text = path.read_text()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise errors.InvalidArgument(f"cannot read {path}: {exc.strerror}") from None
        return parse_hosts_toml(text, domain, plain_http=plain_http, where=str(path))
    return [RegistryHost(api=_api(_default_server(domain, plain_http), False, domain))]
