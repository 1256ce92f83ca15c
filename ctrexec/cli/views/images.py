"""``images`` as docker prints it: REPOSITORY and TAG apart, a 12-digit IMAGE ID, CREATED
as an age and SIZE in docker's decimal units; ``REPO[:TAG]`` to list only some.

Pure: it formats :class:`~ctrexec.containerd.images.ImageSummary` values, so unit tests
check every column without a daemon.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from ctrexec import ImageSummary, InvalidArgument, Reference, parse_reference
from ctrexec.cli.views.durations import human_duration

NONE = "<none>"
_DECIMAL_UNITS = ("B", "kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB")


def scaled(n: float, base: int, units: Sequence[str], digits: int) -> str:
    """go-units' one rule for a size: divide by ``base`` until it fits, ``digits`` significant."""
    value, unit = float(n), 0
    while value >= base and unit < len(units) - 1:
        value /= base
        unit += 1
    return f"{value:.{digits}g}{units[unit]}"


def human_size(n: int) -> str:
    """docker's (go-units') size: three significant digits of 1000-based units, ``4.2MB``."""
    return scaled(n, 1000, _DECIMAL_UNITS, 3)


def image_id(summary: ImageSummary, *, trunc: bool = True) -> str:
    """docker's IMAGE ID: the config digest (the target's when the config is unreadable)."""
    digest = summary.config_digest or summary.digest
    return digest.removeprefix("sha256:")[:12] if trunc else digest


def repo_and_tag(name: str) -> tuple[str, str]:
    """``busybox``/``latest`` for docker.io/library/busybox:latest; ``<none>`` for a part
    a name lacks (a digest-only name has no tag; a name that is no reference, neither)."""
    try:
        ref = parse_reference(name)
    except InvalidArgument:
        return NONE, NONE
    return Reference(ref.domain, ref.path).familiar, ref.tag or NONE


def _digest(name: str, summary: ImageSummary) -> str:
    try:
        return parse_reference(name).digest or summary.digest
    except InvalidArgument:
        return summary.digest


def matching(found: Sequence[ImageSummary], wanted: str | None) -> list[ImageSummary]:
    """docker's ``images REPO[:TAG]``: every tag of the repository, or the one tag given."""
    if wanted is None:
        return list(found)
    want = parse_reference(wanted)
    tagged = ":" in wanted.rsplit("/", 1)[-1] or "@" in wanted
    out = []
    for s in found:
        try:
            have = parse_reference(s.name)
        except InvalidArgument:
            continue
        if have.name == want.name and (not tagged or have == want):
            out.append(s)
    return out


def _built(s: ImageSummary) -> datetime | None:
    """When the image was made (its config's time, else the record's), zone-aware."""
    when = s.built or s.created
    return when.replace(tzinfo=UTC) if when and when.tzinfo is None else when


def newest_first(found: Sequence[ImageSummary]) -> list[ImageSummary]:
    """docker's order: by CREATED, newest first; then by name."""
    by_name = sorted(found, key=lambda s: s.name)
    return sorted(by_name, key=lambda s: _built(s) or _EPOCH, reverse=True)


_EPOCH = datetime.fromtimestamp(0, UTC)


def quiet_ids(found: Sequence[ImageSummary], *, trunc: bool = True) -> list[str]:
    """``images -q``: each image ID once, in listing order (several tags share one)."""
    return list(dict.fromkeys(image_id(s, trunc=trunc) for s in found))


def rows(
    found: Sequence[ImageSummary],
    usage: Mapping[str, int],
    *,
    now: datetime,
    trunc: bool = True,
    digests: bool = False,
) -> tuple[list[str], list[list[object]]]:
    """The header and rows: docker's columns (DIGEST with ``digests``), then CONTAINERS."""
    header = ["REPOSITORY", "TAG", *(["DIGEST"] if digests else []), "IMAGE ID", "CREATED"]
    header += ["SIZE", "CONTAINERS"]
    out: list[list[object]] = []
    for s in found:
        repo, tag = repo_and_tag(s.name)
        built = _built(s)
        created = f"{human_duration((now - built).total_seconds())} ago" if built else "N/A"
        row: list[object] = [repo, tag, *([_digest(s.name, s)] if digests else [])]
        row += [image_id(s, trunc=trunc), created, human_size(s.size), usage.get(s.name, 0)]
        out.append(row)
    return header, out
