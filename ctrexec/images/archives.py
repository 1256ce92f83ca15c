"""Image archives as tar streams: what their members are, and what they name.

Two formats are read, the two that containerd's importer reads:

- an OCI image layout (``oci-layout``, ``index.json``, ``blobs/<alg>/<hex>``), which
  ``ctr images export``, skopeo and docker 25+ write;
- a ``docker save`` archive (``manifest.json`` listing ``Config``, ``RepoTags`` and
  ``Layers`` by path, with ``<id>/layer.tar`` files), which holds no manifest of its
  own: one is built here, a docker schema 2 manifest as containerd's importer builds.

Everything here is pure (bytes and names in, descriptors out), so the conversion is
tested without a daemon; :mod:`ctrexec.images.importer` does the streaming.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ctrexec import errors, ids
from ctrexec.containerd import content
from ctrexec.containerd.content import Descriptor
from ctrexec.images.reference import normalize_reference, parse_reference

OCI_LAYOUT_FILE = "oci-layout"
OCI_LAYOUT_VERSION = "1.0.0"
INDEX_FILE = "index.json"
DOCKER_MANIFEST_FILE = "manifest.json"
REPOSITORIES_FILE = "repositories"
#: Small documents read into memory rather than stored as blobs.
METADATA_FILES = frozenset({OCI_LAYOUT_FILE, INDEX_FILE, DOCKER_MANIFEST_FILE, REPOSITORIES_FILE})
#: docker v1.1 per-layer metadata (``<id>/json``, ``<id>/VERSION``) that no manifest names.
_LEGACY_LAYER_FILES = frozenset({"json", "VERSION"})

ANN_IMAGE_NAME = "io.containerd.image.name"
ANN_REF_NAME = "org.opencontainers.image.ref.name"

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


#: Past this many bytes out of the decompressor, an archive may not have inflated more
#: than INFLATE_RATIO times the bytes read in (gzip of real files is 2-10:1; of zeros,
#: 1000:1). A bomb is refused at the floor, before it costs more than that on disk.
INFLATE_FLOOR = 64 * 1024 * 1024
INFLATE_RATIO = 100


def _escapes(path: str) -> bool:
    return posixpath.isabs(path) or ".." in path.split("/")


def member_path(name: str) -> str:
    """A tar member's name as a clean relative path (``./index.json`` -> ``index.json``);
    InvalidArgument for an absolute name or one with ``..``: no layout writes those,
    and an extracting tool would put them outside its directory."""
    if _escapes(name):
        raise errors.InvalidArgument(
            f"archive member {name!r} points outside the archive (absolute or '..')"
        )
    path = posixpath.normpath("/" + name).lstrip("/")
    return path or "."


def symlink_target(name: str, linkname: str) -> str:
    """Where a symlink member points, relative to the archive's root; InvalidArgument
    when that is outside it (an absolute target, or ``..`` above the root)."""
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(member_path(name)), linkname))
    if posixpath.isabs(linkname) or _escapes(joined):
        raise errors.InvalidArgument(
            f"archive member {member_path(name)!r} links outside the archive (to {linkname!r})"
        )
    return member_path(joined)


def hardlink_target(name: str, linkname: str) -> str:
    """A hard link's target (a path from the archive's root), checked as a name is."""
    if _escapes(linkname):
        raise errors.InvalidArgument(
            f"archive member {member_path(name)!r} links outside the archive (to {linkname!r})"
        )
    return member_path(linkname)


@attrs.define
class Inflation:
    """Bytes read from the archive file or pipe (``raw``) and bytes its members gave
    (``out``): the gzip-bomb bound (INFLATE_FLOOR, INFLATE_RATIO)."""

    raw: int = 0
    out: int = 0

    def check(self) -> None:
        if self.out > INFLATE_FLOOR and self.out > INFLATE_RATIO * max(self.raw, 1):
            raise errors.InvalidArgument(
                f"archive inflates more than {INFLATE_RATIO}:1 ({self.out} bytes from "
                f"{self.raw}): refused as a decompression bomb; if it is meant, "
                "decompress it first (zcat FILE | ctrexec import -)"
            )


def blob_digest(path: str) -> str | None:
    """``blobs/sha256/<hex>`` -> ``sha256:<hex>``; None for any other path."""
    parts = path.split("/")
    if len(parts) != 3 or parts[0] != "blobs":
        return None
    digest = f"{parts[1]}:{parts[2]}"
    try:
        return ids.validate_digest(digest)
    except errors.InvalidArgument:
        return None


def member_kind(path: str) -> str:
    """``"metadata"`` (kept in memory), ``"blob"`` (stored under the digest its path
    names), ``"file"`` (stored under the digest of its bytes) or ``"skip"``."""
    if path in METADATA_FILES:
        return "metadata"
    if blob_digest(path) is not None:
        return "blob"
    if "/" in path and posixpath.basename(path) in _LEGACY_LAYER_FILES:
        return "skip"
    return "file"


def layer_media_type(head: bytes) -> str:
    """A docker-save layer's media type, from its first bytes (its compression)."""
    if head.startswith(_GZIP_MAGIC):
        return content.MT_DOCKER_LAYER_GZIP
    if head.startswith(_ZSTD_MAGIC):
        return content.MT_OCI_LAYER_ZSTD
    return content.MT_DOCKER_LAYER


@attrs.frozen
class ArchiveImage:
    """One image an archive holds: its top descriptor and the names it goes by."""

    target: Descriptor
    names: tuple[str, ...]


def check_layout(meta: Mapping[str, bytes]) -> str:
    """``"oci"`` or ``"docker"``, preferring OCI when both are there (docker 25+ writes
    both); InvalidArgument, in the user's words, for anything else."""
    if OCI_LAYOUT_FILE in meta:
        layout = content.load_json(meta[OCI_LAYOUT_FILE], "oci-layout")
        version = layout.get("imageLayoutVersion")
        if version != OCI_LAYOUT_VERSION:
            raise errors.InvalidArgument(f"unsupported OCI layout version {version!r}")
        if INDEX_FILE not in meta:
            raise errors.InvalidArgument("OCI layout archive has no index.json")
        return "oci"
    if INDEX_FILE in meta:
        return "oci"
    if DOCKER_MANIFEST_FILE in meta:
        return "docker"
    raise errors.InvalidArgument(
        "not an image archive: no oci-layout and index.json, nor a docker manifest.json"
    )


def _name(ref: str, what: str) -> str:
    try:
        return normalize_reference(ref)
    except errors.InvalidArgument as exc:
        raise errors.InvalidArgument(f"{what}: {exc}") from None


def entry_name(desc: Descriptor, base_name: str | None = None) -> str | None:
    """The image name an index.json entry gives, as ``ctr images import`` reads it:
    ``io.containerd.image.name``, else ``org.opencontainers.image.ref.name`` when it
    is a whole reference, else ``BASE:TAG`` with ``base_name``. None: no name at all."""
    what = f"archive entry {desc.digest[:19]}"
    full = desc.annotations.get(ANN_IMAGE_NAME, "")
    if full:
        return _name(full, what)
    ref = desc.annotations.get(ANN_REF_NAME, "")
    if not ref:
        return None
    if any(c in ref for c in "/:@"):
        return _name(ref, what)
    if base_name:
        return _name(f"{parse_reference(base_name).name}:{ref}", what)
    raise errors.InvalidArgument(
        f"{what} is named only by its tag {ref!r}: give the repository with --base-name"
    )


def oci_images(index_json: bytes, base_name: str | None = None) -> list[ArchiveImage]:
    """The named images of an OCI layout's index.json (one per entry, names merged
    when several entries share a target)."""
    index = content.load_json(index_json, "index.json")
    entries = content.index_entries(index, "index.json")
    found: dict[str, tuple[Descriptor, list[str]]] = {}
    for entry in entries:
        desc = Descriptor.from_json(entry, "index.json entry")
        name = entry_name(desc, base_name)
        target = attrs.evolve(desc, annotations={})
        slot = found.setdefault(desc.digest, (target, []))
        if name is not None and name not in slot[1]:
            slot[1].append(name)
    return [ArchiveImage(t, tuple(n)) for t, n in found.values() if n]


@attrs.frozen
class DockerEntry:
    """One ``manifest.json`` entry: the member paths of its config and layers."""

    config: str
    layers: tuple[str, ...]
    repo_tags: tuple[str, ...]


def docker_entries(manifest_json: bytes) -> list[DockerEntry]:
    try:
        obj = json.loads(manifest_json)
    except ValueError as exc:
        raise errors.InvalidArgument(f"manifest.json is not valid JSON: {exc}") from None
    if not isinstance(obj, list):
        raise errors.InvalidArgument("manifest.json is not a list of images")
    out = []
    for item in obj:
        if not isinstance(item, dict) or not isinstance(item.get("Config"), str):
            raise errors.InvalidArgument("manifest.json entry has no Config path")
        out.append(
            DockerEntry(
                member_path(item["Config"]),
                tuple(
                    member_path(p)
                    for p in content.json_strings(item.get("Layers"), "manifest.json Layers")
                ),
                content.json_strings(item.get("RepoTags"), "manifest.json RepoTags"),
            )
        )
    return out


def descriptor_json(desc: Descriptor) -> dict[str, Any]:
    """A descriptor as manifests carry it, keys in the order Go's encoder writes them."""
    out: dict[str, Any] = {"mediaType": desc.media_type, "digest": desc.digest, "size": desc.size}
    if desc.annotations:
        out["annotations"] = dict(desc.annotations)
    return out


def compact_json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def docker_manifest(config: Descriptor, layers: Sequence[Descriptor]) -> bytes:
    """The docker schema 2 manifest containerd's importer builds for a docker-save
    image (same fields, same order), so both name the image by the same digest."""
    manifest = {
        "schemaVersion": 2,
        "mediaType": content.MT_DOCKER_MANIFEST,
        "config": descriptor_json(attrs.evolve(config, media_type=content.MT_DOCKER_CONFIG)),
        "layers": [descriptor_json(layer) for layer in layers],
    }
    return compact_json(manifest)


def docker_names(entry: DockerEntry) -> tuple[str, ...]:
    return tuple(dict.fromkeys(_name(t, "manifest.json RepoTags") for t in entry.repo_tags))


def resolve_member(
    path: str, stored: Mapping[str, Descriptor], symlinks: Mapping[str, str]
) -> Descriptor:
    """The stored blob a manifest.json path names, through symlinks (docker save links
    a repeated layer to its first copy)."""
    seen = 0
    while path not in stored and path in symlinks and seen < 16:
        path, seen = symlinks[path], seen + 1
    try:
        return stored[path]
    except KeyError:
        raise errors.InvalidArgument(
            f"manifest.json names {path!r}, which the archive lacks"
        ) from None


# -- writing ------------------------------------------------------------------------------


def blob_path(digest: str) -> str:
    algorithm, hexpart = ids.validate_digest(digest).split(":", 1)
    return f"blobs/{algorithm}/{hexpart}"


def ref_annotations(name: str) -> dict[str, str]:
    """Both names an exported entry carries: containerd's full name, and the OCI ref
    name (the tag, or the digest), as ``ctr images export`` writes them."""
    ref = parse_reference(name)
    return {ANN_IMAGE_NAME: name, ANN_REF_NAME: ref.tag or ref.digest}


def index_json(entries: Sequence[tuple[Descriptor, str]]) -> bytes:
    """index.json for (target, name) pairs: one entry per name."""
    manifests = [
        descriptor_json(attrs.evolve(target, annotations=ref_annotations(name)))
        for target, name in entries
    ]
    return compact_json(
        {"schemaVersion": 2, "mediaType": content.MT_OCI_INDEX, "manifests": manifests}
    )


def layout_json() -> bytes:
    return compact_json({"imageLayoutVersion": OCI_LAYOUT_VERSION})


def docker_manifest_json(
    images: Sequence[tuple[Descriptor, Sequence[Descriptor], Sequence[str]]],
) -> bytes:
    """manifest.json (config, layers, familiar RepoTags) so ``docker load`` reads the
    same archive; paths point into blobs/."""
    out = [
        {
            "Config": blob_path(config.digest),
            "RepoTags": [r.familiar for n in names if (r := parse_reference(n)).tag],
            "Layers": [blob_path(layer.digest) for layer in layers],
        }
        for config, layers, names in images
    ]
    return compact_json(out)
