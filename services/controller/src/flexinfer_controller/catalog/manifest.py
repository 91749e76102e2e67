"""Manifests: the media types we accept, their parsing, digests and sizes.

An OCI image manifest or Docker v2 manifest names a ``config`` and ``layers``; an OCI
artifact manifest names ``blobs``; an OCI index or Docker manifest list names child
``manifests``. A manifest's digest is the hash of its exact bytes, which is what
``Docker-Content-Digest`` must say; both are checked when both are there.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flexinfer_controller.catalog.errors import DigestMismatchError, RegistryProtocolError

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_ARTIFACT = "application/vnd.oci.artifact.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MEDIA_TYPES = (OCI_MANIFEST, OCI_INDEX, OCI_ARTIFACT, DOCKER_MANIFEST, DOCKER_LIST)
INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_LIST})
ACCEPT = ", ".join(MEDIA_TYPES)
MAX_MANIFEST_BYTES = 4 << 20  # the size the distribution spec asks registries to accept

_HASHES = {"sha256": hashlib.sha256, "sha512": hashlib.sha512}
_DIGEST = re.compile(r"(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})")


@dataclass(frozen=True, slots=True)
class Descriptor:
    """A content descriptor: what a manifest points at."""

    media_type: str
    digest: str
    size: int
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Manifest:
    """A fetched, verified manifest."""

    digest: str
    media_type: str
    size: int
    """Bytes of the manifest itself."""
    blobs: tuple[Descriptor, ...] = ()
    """Config and layers (image), or blobs (artifact)."""
    children: tuple[Descriptor, ...] = ()
    """Child manifests of an index or manifest list."""
    annotations: Mapping[str, str] = field(default_factory=dict)
    artifact_type: str | None = None

    @property
    def is_index(self) -> bool:
        """True for an OCI index or Docker manifest list."""
        return self.media_type in INDEX_TYPES

    @property
    def blob_size(self) -> int:
        """Bytes of every blob this manifest names (children not included)."""
        return sum(d.size for d in self.blobs)


def digest_of(body: bytes, algorithm: str = "sha256") -> str:
    """``algorithm:hex`` of ``body``."""
    return f"{algorithm}:{_HASHES[algorithm](body).hexdigest()}"


def verified_digest(
    registry: str, what: str, body: bytes, header: str | None, requested: str | None
) -> str:
    """The digest of ``body``, checked against Docker-Content-Digest and the requested one."""
    if header is not None and not _DIGEST.fullmatch(header):
        raise RegistryProtocolError(registry, f"{what}: bad Docker-Content-Digest {header!r}")
    for expected in (requested, header):
        if expected and digest_of(body, expected.split(":", 1)[0]) != expected:
            actual = digest_of(body, expected.split(":", 1)[0])
            raise DigestMismatchError(registry, what, expected, actual)
    return requested or header or digest_of(body)


def parse_manifest(
    registry: str, what: str, body: bytes, content_type: str, digest: str
) -> Manifest:
    """Parse a verified manifest body; RegistryProtocolError when it is not one we know."""
    doc = _json(registry, what, body)
    media_type = doc.get("mediaType") or content_type.split(";", 1)[0].strip()
    if media_type not in MEDIA_TYPES:
        raise RegistryProtocolError(registry, f"{what}: unsupported manifest type {media_type!r}")
    children = _descriptors(registry, what, doc.get("manifests"))
    blob_key = "blobs" if media_type == OCI_ARTIFACT else "layers"
    blobs = _descriptors(registry, what, doc.get(blob_key))
    if media_type not in INDEX_TYPES and media_type != OCI_ARTIFACT:
        config = doc.get("config")
        if not isinstance(config, Mapping):
            raise RegistryProtocolError(registry, f"{what}: image manifest has no config")
        blobs = (*_descriptors(registry, what, [config]), *blobs)
    artifact_type = doc.get("artifactType")
    return Manifest(
        digest=digest,
        media_type=media_type,
        size=len(body),
        blobs=blobs,
        children=children if media_type in INDEX_TYPES else (),
        annotations=_annotations(registry, what, doc.get("annotations")),
        artifact_type=artifact_type if isinstance(artifact_type, str) else None,
    )


def _json(registry: str, what: str, body: bytes) -> Mapping[str, Any]:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RegistryProtocolError(registry, f"{what}: manifest is not JSON") from exc
    if not isinstance(doc, dict) or doc.get("schemaVersion", 2) != 2:
        raise RegistryProtocolError(registry, f"{what}: manifest is not schemaVersion 2")
    return doc


def _descriptors(registry: str, what: str, items: Any) -> tuple[Descriptor, ...]:
    if items is None:
        return ()
    if not isinstance(items, list):
        raise RegistryProtocolError(registry, f"{what}: descriptors must be a list")
    out: list[Descriptor] = []
    for item in items:
        if not isinstance(item, Mapping):
            raise RegistryProtocolError(registry, f"{what}: a descriptor is not an object")
        size, digest, media_type = item.get("size"), item.get("digest"), item.get("mediaType")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise RegistryProtocolError(registry, f"{what}: a descriptor has no valid size")
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            raise RegistryProtocolError(registry, f"{what}: a descriptor has no valid digest")
        out.append(
            Descriptor(
                media_type=media_type if isinstance(media_type, str) else "",
                digest=digest,
                size=size,
                annotations=_annotations(registry, what, item.get("annotations")),
            )
        )
    return tuple(out)


def _annotations(registry: str, what: str, value: Any) -> Mapping[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise RegistryProtocolError(registry, f"{what}: annotations must map strings to strings")
    return dict(value)
