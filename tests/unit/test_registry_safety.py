"""The pure rules of a pull from a hostile registry (docs/security.md, "Registry pulls")."""

from __future__ import annotations

import pytest

from ctrexec import errors
from ctrexec.images.registry import auth, hosts

CREDS = {"Authorization": "Basic dTpw", "Cookie": "c=1", "Accept": "x", "User-Agent": "ctrexec"}


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("http://127.0.0.1:5000/v2/x", "http://127.0.0.1:5000/blob", True),
        ("https://r.example/v2/", "https://R.example:443/x", True),
        ("http://127.0.0.1:5000/v2/", "http://127.0.0.1:5001/v2/", False),  # a port: another
        ("http://127.0.0.1:5000/", "http://127.0.0.2:5000/", False),
        ("http://r.example/", "https://r.example/", False),
        ("https://registry-1.docker.io/v2/", "https://auth.docker.io/token", False),
    ],
)
def test_what_counts_as_another_host(a: str, b: str, same: bool) -> None:
    assert (hosts.origin(a) == hosts.origin(b)) is same


def test_credentials_are_dropped_on_a_redirect_to_another_host_only() -> None:
    url = "http://127.0.0.1:5000/v2/r/blobs/sha256:1"
    kept = hosts.redirect_headers(CREDS, url, "http://127.0.0.1:5000/other")
    assert kept == CREDS
    away = hosts.redirect_headers(CREDS, url, "http://127.0.0.2:5000/cdn")
    assert away == {"Accept": "x", "User-Agent": "ctrexec"}
    # once dropped, a redirect back does not bring them back: there is nothing to bring
    assert hosts.redirect_headers(away, "http://127.0.0.2:5000/cdn", url) == away


def test_redirect_targets() -> None:
    base = "https://r.example/v2/x/blobs/sha256:1"
    assert hosts.redirect_target(base, "/cdn/1", "r") == "https://r.example/cdn/1"
    assert hosts.redirect_target(base, "https://cdn.example/1", "r") == "https://cdn.example/1"
    with pytest.raises(errors.RegistryRefused, match="down to"):
        hosts.redirect_target(base, "http://cdn.example/1", "r")
    with pytest.raises(errors.RegistryRefused, match="not an http"):
        hosts.redirect_target(base, "file:///etc/shadow", "r")
    assert hosts.MAX_REDIRECTS == 10


def test_token_realm_rule() -> None:
    # another host is fine (Docker Hub's realm is auth.docker.io), in clear is not
    assert auth.realm_may_have_credentials(
        "https://registry-1.docker.io/v2", "https://auth.docker.io/token"
    )
    assert auth.realm_may_have_credentials("http://127.0.0.1:5000/v2", "http://127.0.0.2:80/token")
    assert not auth.realm_may_have_credentials("https://r.example/v2", "http://r.example/token")
