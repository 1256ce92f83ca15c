"""Registry credentials: docker's config.json, credential helpers, auth challenges.

Credentials come from the file docker reads and writes, ``$DOCKER_CONFIG/config.json``
(``~/.docker/config.json`` by default), so ``docker login`` and ``ctrexec login`` share
them: ``credHelpers[<host>]`` names a helper for one registry, ``credsStore`` one for
all, else ``auths[<host>].auth`` holds base64 ``user:password``. A helper is the
program ``docker-credential-<name>`` on PATH, spoken to as docker does: ``get`` with the
server URL on stdin answers ``{"Username": ..., "Secret": ...}`` on stdout; ``store``
takes ``{"ServerURL", "Username", "Secret"}``; ``erase`` takes the URL.

A registry answers 401 with ``WWW-Authenticate``: ``Basic realm=...`` (send the
credentials) or ``Bearer realm=...,service=...,scope=...`` (ask the realm for a token,
with the credentials if any, and send the token).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ctrexec import errors
from ctrexec.images.reference import parse_reference

if TYPE_CHECKING:  # a type only: `pull` loads this module, not ctrexec.paths
    from ctrexec.paths import StrPath

DOCKER_CONFIG_ENV = "DOCKER_CONFIG"
#: The key docker uses for Docker Hub in config.json.
DOCKER_HUB_KEY = "https://index.docker.io/v1/"
_HUB_ALIASES = ("docker.io", "index.docker.io", "registry-1.docker.io", DOCKER_HUB_KEY)
_HELPER_TIMEOUT = 60.0


@attrs.frozen
class Credentials:
    """A user name and secret; ``username == "<token>"`` marks an identity token."""

    username: str
    secret: str = attrs.field(repr=False)

    @property
    def basic(self) -> str:
        raw = f"{self.username}:{self.secret}".encode()
        return "Basic " + base64.b64encode(raw).decode("ascii")


@attrs.frozen
class Challenge:
    scheme: str  # "basic" or "bearer", lower case
    params: dict[str, str]


def config_path() -> Path:
    base = os.environ.get(DOCKER_CONFIG_ENV)
    return Path(base) / "config.json" if base else Path.home() / ".docker" / "config.json"


def server_key(domain: str) -> str:
    """The key config.json uses for ``domain`` (docker's own for Docker Hub)."""
    return DOCKER_HUB_KEY if domain in _HUB_ALIASES else domain


def _keys(domain: str) -> list[str]:
    if domain in _HUB_ALIASES:
        return [DOCKER_HUB_KEY, *_HUB_ALIASES]
    return [domain, f"https://{domain}", f"http://{domain}"]


def load_config(path: Path | None = None) -> dict[str, Any]:
    path = path or config_path()
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise errors.InvalidArgument(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise errors.InvalidArgument(f"{path} is not a JSON object")
    return data


def save_config(cfg: dict[str, Any], path: Path | None = None) -> None:
    """Write the file atomically, readable by its owner only (it holds secrets)."""
    path = path or config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".config.json.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(cfg, f, indent="\t")
            f.write("\n")
        Path(tmp).replace(path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            Path(tmp).unlink()
        raise


def _helper_of(cfg: dict[str, Any], domain: str) -> str:
    helpers = cfg.get("credHelpers") or {}
    for key in _keys(domain):
        if isinstance(helpers, dict) and isinstance(helpers.get(key), str):
            return str(helpers[key])
    store = cfg.get("credsStore")
    return store if isinstance(store, str) else ""


def _run_helper(helper: str, action: str, stdin: str) -> subprocess.CompletedProcess[str]:
    program = f"docker-credential-{helper}"
    try:
        return subprocess.run(
            [program, action],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=_HELPER_TIMEOUT,
            check=False,
        )
    except FileNotFoundError:
        raise errors.InvalidArgument(f"credential helper {program} is not on PATH") from None
    except subprocess.TimeoutExpired:
        raise errors.DeadlineExceeded(f"credential helper {program} did not answer") from None


def _said(proc: subprocess.CompletedProcess[str]) -> str:
    """A failed helper's words for an error message. Helpers print their errors on
    stdout too, where a half-working one may also have printed the credentials: a
    JSON answer is never repeated (docs/security.md)."""
    text = (proc.stderr or proc.stdout).strip()
    if not text or text.startswith("{") or "secret" in text.lower():
        return f"exit status {proc.returncode}"
    return text[:200]


def _helper_get(helper: str, domain: str) -> Credentials | None:
    for key in dict.fromkeys([server_key(domain), domain]):
        proc = _run_helper(helper, "get", key)
        if proc.returncode != 0:
            if "credentials not found" in (proc.stdout + proc.stderr).lower():
                continue
            raise errors.PermissionDenied(
                f"credential helper docker-credential-{helper} failed: {_said(proc)}"
            )
        try:
            answer = json.loads(proc.stdout)
            return Credentials(str(answer["Username"]), str(answer["Secret"]))
        except (ValueError, KeyError, TypeError):
            raise errors.PermissionDenied(
                f"credential helper docker-credential-{helper} answered no credentials JSON"
            ) from None
    return None


def _from_auths(cfg: dict[str, Any], domain: str) -> Credentials | None:
    auths = cfg.get("auths") or {}
    for key in _keys(domain):
        entry = auths.get(key) if isinstance(auths, dict) else None
        if not isinstance(entry, dict):
            continue
        if isinstance(entry.get("identitytoken"), str) and entry["identitytoken"]:
            return Credentials("<token>", entry["identitytoken"])
        if isinstance(entry.get("auth"), str) and entry["auth"]:
            try:
                user, _, secret = base64.b64decode(entry["auth"]).decode().partition(":")
            except ValueError:
                raise errors.InvalidArgument(f"config.json: bad auth for {key}") from None
            return Credentials(user, secret)
        if isinstance(entry.get("username"), str) and isinstance(entry.get("password"), str):
            return Credentials(entry["username"], entry["password"])
    return None


def from_helper(helper: str, domain: str) -> Credentials | None:
    """What ``docker-credential-<helper> get`` answers for ``domain`` (None: it has none)."""
    return _helper_get(helper, domain)


def credentials_from_helper(helper: str, ref: str) -> Credentials | None:
    """What ``docker-credential-<helper> get`` answers for the registry of the image
    ``ref`` (None: it has none), for a caller that names its helper itself, as Nomad's
    plugin config does, instead of docker's config file."""
    return _helper_get(helper, parse_reference(ref).domain)


def lookup(domain: str, path: Path | None = None) -> Credentials | None:
    """The credentials for ``domain`` that docker would use, or None (anonymous)."""
    cfg = load_config(path)
    helper = _helper_of(cfg, domain)
    if helper:
        return _helper_get(helper, domain)
    return _from_auths(cfg, domain)


def store(domain: str, creds: Credentials, path: Path | None = None) -> str:
    """Save credentials where docker would (a helper, else ``auths``); returns where."""
    cfg = load_config(path)
    helper = _helper_of(cfg, domain)
    key = server_key(domain)
    if helper:
        doc = json.dumps({"ServerURL": key, "Username": creds.username, "Secret": creds.secret})
        proc = _run_helper(helper, "store", doc)
        if proc.returncode != 0:
            raise errors.PermissionDenied(f"docker-credential-{helper} store failed: {_said(proc)}")
        return f"docker-credential-{helper}"
    auths = cfg.setdefault("auths", {})
    entry = {"auth": base64.b64encode(f"{creds.username}:{creds.secret}".encode()).decode()}
    auths[key] = entry
    save_config(cfg, path)
    return str(path or config_path())


def erase(domain: str, path: StrPath | None = None) -> bool:
    """Forget ``domain``'s credentials (helper and file); True when any were there.
    ``path``: the config file, a str or a Path as every public path (the logout's)."""
    path = None if path is None else Path(path)
    cfg = load_config(path)
    helper = _helper_of(cfg, domain)
    found = False
    if helper:
        found = _run_helper(helper, "erase", server_key(domain)).returncode == 0
    auths = cfg.get("auths")
    if isinstance(auths, dict):
        for key in _keys(domain):
            if auths.pop(key, None) is not None:
                found = True
        save_config(cfg, path)
    return found


# -- challenges ------------------------------------------------------------------------------


def realm_may_have_credentials(endpoint: str, realm: str) -> bool:
    """Whether the registry's credentials may go to its token ``realm``. A realm on
    another host is normal (Docker Hub's API is registry-1.docker.io, its realm
    auth.docker.io) and docker sends it the credentials, as the token spec says, so
    ctrexec does too; but not in clear for a registry reached over HTTPS."""
    return not (endpoint.startswith("https://") and realm.startswith("http://"))


_PARAM_RE = re.compile(r'\s*([A-Za-z0-9_-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^,\s]*))\s*,?')


def parse_challenges(header: str) -> list[Challenge]:
    """``Bearer realm="...",service="...",scope="..."`` (and Basic) as Challenges."""
    out: list[Challenge] = []
    rest = header.strip()
    while rest:
        m = re.match(r"([A-Za-z]+)\s*", rest)
        if m is None:
            break
        scheme, rest = m[1].lower(), rest[m.end() :]
        params: dict[str, str] = {}
        while (p := _PARAM_RE.match(rest)) is not None and p.end() > 0:
            value = p[2] if p[2] is not None else p[3]
            params[p[1].lower()] = re.sub(r"\\(.)", r"\1", value or "")
            rest = rest[p.end() :]
        out.append(Challenge(scheme, params))
        rest = rest.lstrip(", ")
    return out
