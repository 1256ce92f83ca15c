"""normalize_reference against docker's documented behaviour (distribution/reference)."""

from __future__ import annotations

import pytest

from ctrexec import errors
from ctrexec.images.reference import Reference, normalize_reference, parse_reference

D = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("busybox", "docker.io/library/busybox:latest"),
        ("busybox:1.36", "docker.io/library/busybox:1.36"),
        ("library/busybox", "docker.io/library/busybox:latest"),
        ("docker.io/busybox", "docker.io/library/busybox:latest"),
        ("docker.io/library/busybox:latest", "docker.io/library/busybox:latest"),
        ("index.docker.io/busybox", "docker.io/library/busybox:latest"),
        ("index.docker.io/user/app", "docker.io/user/app:latest"),
        ("user/app", "docker.io/user/app:latest"),
        ("user/app:v1.2_rc-3", "docker.io/user/app:v1.2_rc-3"),
        ("a/b/c/d", "docker.io/a/b/c/d:latest"),
        ("localhost/app", "localhost/app:latest"),
        ("localhost:5000/x", "localhost:5000/x:latest"),
        ("localhost:5000/x:tag", "localhost:5000/x:tag"),
        ("127.0.0.1:5000/team/app", "127.0.0.1:5000/team/app:latest"),
        ("registry.example.com/team/app:v1", "registry.example.com/team/app:v1"),
        ("quay.io/coreos/etcd", "quay.io/coreos/etcd:latest"),
        ("[::1]:5000/app", "[::1]:5000/app:latest"),
        ("my-registry:443/app", "my-registry:443/app:latest"),
        # an upper-case first component is a registry host, as in docker
        ("Registry/app", "Registry/app:latest"),
        ("a__b/c.d-e", "docker.io/a__b/c.d-e:latest"),
        ("app---x", "docker.io/library/app---x:latest"),
        (f"busybox@{D}", f"docker.io/library/busybox@{D}"),
        (f"busybox:1.36@{D}", f"docker.io/library/busybox:1.36@{D}"),
        (f"localhost:5000/x@{D}", f"localhost:5000/x@{D}"),
    ],
)
def test_normalize(ref: str, expected: str) -> None:
    assert normalize_reference(ref) == expected


@pytest.mark.parametrize(
    "ref",
    [
        "",
        "Busybox",
        "user/App",
        "busybox:",
        ":tag",
        "busybox:bad tag",
        "busybox:-tag",
        "busybox:" + "a" * 129,
        "a//b",
        "/busybox",
        "busybox/",
        "-busybox",
        "busy_-box",
        "busybox@sha256:abc",
        "busybox@sha256:" + "AB" * 32,
        "busybox@md5:" + "ab" * 16,
        "busybox@",
        "ab" * 32,  # a bare image ID is not a name
        "busy box",
        "busybox\n",
        "localhost:port/x",
        "docker.io/" + "a" * 250,
    ],
)
def test_invalid(ref: str) -> None:
    with pytest.raises(errors.InvalidArgument) as exc:
        normalize_reference(ref)
    assert "\n" not in str(exc.value)


def test_parts_and_familiar_name() -> None:
    r = parse_reference("busybox:1.36")
    assert r == Reference("docker.io", "library/busybox", "1.36", "")
    assert r.name == "docker.io/library/busybox"
    assert r.familiar == "busybox:1.36"
    assert parse_reference("user/app").familiar == "user/app:latest"
    assert parse_reference("localhost:5000/x").familiar == "localhost:5000/x:latest"
    d = parse_reference(f"busybox@{D}")
    assert (d.tag, d.digest) == ("", D)
    assert d.familiar == f"busybox@{D}"


def test_the_public_names_are_the_parsers() -> None:
    """A front end (the CLI's ``images``, ``save``, ``push``) reads a user's word through
    ctrexec itself: docker's short form back, and docker's refusal before connecting."""
    import ctrexec

    ref = ctrexec.parse_reference("user/app")
    assert isinstance(ref, ctrexec.Reference)
    assert (ref.name, ref.tag, ref.familiar) == ("docker.io/user/app", "latest", "user/app:latest")
    assert str(ref) == ctrexec.normalize_reference("user/app")
    with pytest.raises(ctrexec.InvalidArgument, match="repository name must be lowercase"):
        ctrexec.parse_reference("Busybox")
