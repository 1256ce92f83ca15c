"""Image references: docker's distribution/reference grammar, and its normalising.

The one place a user's word for an image (``busybox``, ``user/app:v1``,
``host:5000/x@sha256:...``) becomes the name containerd stores
(``docker.io/library/busybox:latest``). Pure: the standard library, ``ids`` (the
digest grammar) and ``errors``, so the CLI checks a reference before it connects and
unit tests need no containerd. ``containerd/`` works on the names made here and never
parses one.
"""

from __future__ import annotations

import re

import attrs

from ctrexec import errors, ids

DEFAULT_DOMAIN = "docker.io"
_LEGACY_DOMAIN = "index.docker.io"
_OFFICIAL_PREFIX = "library/"
_NAME_MAX = 255
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_REFERENCE_RE = re.compile(
    rf"^(?P<domain>{_DOMAIN})/(?P<path>{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?"
    r"(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?$"
)
_IMAGE_ID_RE = re.compile(r"^[a-f0-9]{64}$")


@attrs.frozen
class Reference:
    """A parsed, normalized image reference: ``domain/path[:tag][@digest]``. Public, with
    :func:`parse_reference`: a front end shows docker's short form (``familiar``), and
    compares names by repository or tag, as containerd stores them."""

    domain: str
    path: str
    tag: str = ""
    digest: str = ""

    @property
    def name(self) -> str:
        return f"{self.domain}/{self.path}"

    @property
    def familiar(self) -> str:
        """The short form docker prints: ``busybox:latest``, ``user/app:v1``."""
        name = self.path if self.domain == DEFAULT_DOMAIN else self.name
        name = name.removeprefix(_OFFICIAL_PREFIX) if self.domain == DEFAULT_DOMAIN else name
        return (
            name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")
        )

    def __str__(self) -> str:
        return (
            self.name
            + (f":{self.tag}" if self.tag else "")
            + (f"@{self.digest}" if self.digest else "")
        )


def _bad_ref(ref: str, why: str = "") -> errors.InvalidArgument:
    shown = ref.encode("unicode_escape").decode("ascii")
    return errors.InvalidArgument(
        f"invalid reference format {shown!r}" + (f": {why}" if why else "")
    )


def parse_reference(ref: str) -> Reference:
    """Parse like docker's ParseNormalizedNamed and add ``:latest`` when there is no tag
    or digest. InvalidArgument (one line) for anything docker would refuse: a front end
    checks a user's word before it connects, so a typo starts nothing."""
    if not isinstance(ref, str) or not ref:
        raise errors.InvalidArgument("image reference must not be empty")
    if _IMAGE_ID_RE.fullmatch(ref):
        raise _bad_ref(ref, "cannot specify a 64-byte hexadecimal string as a name")
    slash = ref.find("/")
    first = ref[:slash]
    if slash == -1 or (
        not any(c in first for c in ".:") and first != "localhost" and first.lower() == first
    ):
        domain, rest = DEFAULT_DOMAIN, ref
    else:
        domain, rest = first, ref[slash + 1 :]
    if domain == _LEGACY_DOMAIN:
        domain = DEFAULT_DOMAIN
    if domain == DEFAULT_DOMAIN and "/" not in rest:
        rest = _OFFICIAL_PREFIX + rest
    remote = rest.split("@", 1)[0].split(":", 1)[0]
    if remote.lower() != remote:
        raise _bad_ref(ref, "repository name must be lowercase")
    m = _REFERENCE_RE.fullmatch(f"{domain}/{rest}")
    if m is None:
        raise _bad_ref(ref)
    if len(m["domain"]) + 1 + len(m["path"]) > _NAME_MAX:
        raise _bad_ref(ref, f"repository name longer than {_NAME_MAX} characters")
    digest = m["digest"] or ""
    if digest:
        try:
            ids.validate_digest(digest)
        except errors.InvalidArgument:
            raise _bad_ref(ref, "invalid or unsupported digest") from None
    tag = m["tag"] or ("" if digest else "latest")
    return Reference(m["domain"], m["path"], tag, digest)


def normalize_reference(ref: str) -> str:
    """``busybox`` -> ``docker.io/library/busybox:latest``, the name containerd stores."""
    return str(parse_reference(ref))


def is_dangling(name: str) -> bool:
    """True for an image name without a tag (docker's ``<none>``): a digest-only name
    such as ``repo@sha256:...``, or a record name that is no reference at all."""
    try:
        return not parse_reference(name).tag
    except errors.InvalidArgument:
        return True
