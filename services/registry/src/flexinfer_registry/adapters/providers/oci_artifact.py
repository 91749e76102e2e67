"""OCI model artifacts without the network: references, manifests, and the files they name.

A reference is ``oci://<host>[:port]/<repository>[:<tag>|@<digest>]`` (the tag defaults to
``latest``, as docker's does). A model artifact is an OCI image manifest, a Docker v2
manifest or an OCI artifact manifest whose every layer is one file, named by its
``org.opencontainers.image.title`` annotation: how ``oras push`` stores files. An OCI
index (or Docker manifest list) is followed when it names exactly one image manifest
(attestations aside); with several the caller must name one by digest.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from flexinfer_common.errors import InvalidSpecError, PermanentError
from flexinfer_registry.core.providers.base import ChecksumMismatchError, UnsafePathError
from flexinfer_registry.core.providers.files import is_weight_file, safe_relative_path

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_ARTIFACT = "application/vnd.oci.artifact.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST, OCI_ARTIFACT)
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
ACCEPT = ", ".join(MANIFEST_TYPES + INDEX_TYPES)
TITLE = "org.opencontainers.image.title"
UNPACK = "io.deis.oras.content.unpack"
"""ORAS marks a layer that is a tarball of a directory with this annotation."""
MAX_MANIFEST_BYTES = 4 << 20
"""The manifest size the distribution spec asks registries to accept."""
DEFAULT_TAG = "latest"

_HOST = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
    r"|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$"
)
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
_DIGEST = re.compile(r"^(?:sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$")


class UnsupportedArtifactError(PermanentError):
    """The reference names something that is not a model artifact we can download."""


@dataclass(frozen=True)
class OciReference:
    """A parsed ``oci://`` model name: where the registry is and what to fetch from it."""

    host: str
    """``host[:port]``, lowercase: what insecure registries and credentials are keyed by."""
    repository: str
    reference: str
    """A tag or a ``sha256:…`` digest."""

    @property
    def pinned(self) -> bool:
        """Whether the reference is a digest (the content cannot change)."""
        return _DIGEST.match(self.reference) is not None

    def __str__(self) -> str:
        sep = "@" if self.pinned else ":"
        return f"oci://{self.host}/{self.repository}{sep}{self.reference}"


@dataclass(frozen=True)
class Blob:
    """One layer to download: its digest, its announced size, the file it becomes."""

    digest: str
    size: int
    path: str


def _invalid(model_name: str, why: str) -> InvalidSpecError:
    return InvalidSpecError(
        f"OCI model names are oci://host[:port]/repository[:tag|@sha256:digest]; "
        f"{model_name[:160]!r}: {why}",
        field="model_name",
    )


def parse_reference(model_name: str, revision: str | None = None) -> OciReference:
    """Parse an ``oci://`` name; ``revision`` (a tag or digest) applies when it names none."""
    scheme, sep, rest = model_name.partition("://")
    if scheme.lower() != "oci" or not sep:
        raise _invalid(model_name, "not an oci:// URL")
    host, _, path = rest.partition("/")
    if not _HOST.match(host):
        raise _invalid(model_name, "the registry host is missing or malformed")
    reference = ""
    if "@" in path:
        path, _, reference = path.partition("@")
        if not _DIGEST.match(reference):
            raise _invalid(model_name, "a digest is sha256: and 64 lowercase hex digits")
    elif ":" in path.rpartition("/")[2]:
        path, _, reference = path.rpartition(":")
        if not _TAG.match(reference):
            raise _invalid(model_name, "the tag is malformed")
    if len(path) > 255 or not _REPOSITORY.match(path):
        raise _invalid(model_name, "the repository is missing or malformed (lowercase a-z0-9._-/)")
    if revision:
        if reference and revision != reference:
            raise InvalidSpecError(
                f"revision {revision[:80]!r} differs from the one in {model_name[:160]!r}",
                field="revision",
            )
        if not (_TAG.match(revision) or _DIGEST.match(revision)):
            raise InvalidSpecError(
                f"revision {revision[:80]!r} is no tag or digest", field="revision"
            )
        reference = revision
    return OciReference(host.lower(), path, reference or DEFAULT_TAG)


def manifest_digest(body: bytes, algorithm: str = "sha256") -> str:
    """``<algorithm>:<hex>`` of a manifest's exact bytes."""
    return f"{algorithm}:{hashlib.new(algorithm, body).hexdigest()}"


def check_manifest_digest(body: bytes, expected: str, what: str) -> None:
    """ChecksumMismatchError unless ``body`` hashes to ``expected`` (``sha256:…``)."""
    algorithm = expected.partition(":")[0]
    if algorithm not in ("sha256", "sha512") or manifest_digest(body, algorithm) != expected:
        raise ChecksumMismatchError(f"{what}: the manifest does not match digest {expected}")


def parse_manifest(body: bytes, content_type: str, what: str) -> tuple[str, dict[str, Any]]:
    """The manifest's media type and document; UnsupportedArtifactError for anything else."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UnsupportedArtifactError(f"{what}: the manifest is not JSON") from exc
    if not isinstance(doc, dict):
        raise UnsupportedArtifactError(f"{what}: the manifest is not a JSON object")
    declared = doc.get("mediaType")
    media_type = declared if isinstance(declared, str) and declared else content_type
    media_type = media_type.split(";")[0].strip()
    if media_type not in MANIFEST_TYPES + INDEX_TYPES:
        raise UnsupportedArtifactError(
            f"{what}: media type {media_type[:100]!r} is not an OCI image manifest, Docker v2 "
            "manifest, OCI artifact manifest or OCI index"
        )
    return media_type, doc


def _is_attestation(entry: dict[str, Any]) -> bool:
    annotations = entry.get("annotations") or {}
    platform = entry.get("platform") or {}
    return (
        annotations.get("vnd.docker.reference.type") == "attestation-manifest"
        or platform.get("os") == "unknown"
    )


def pick_from_index(doc: dict[str, Any], what: str) -> str:
    """The digest of the one image manifest an index names (attestations aside)."""
    entries = doc.get("manifests")
    if not isinstance(entries, list):
        raise UnsupportedArtifactError(f"{what}: the index has no 'manifests' list")
    children = [
        e for e in entries
        if isinstance(e, dict) and e.get("mediaType") in MANIFEST_TYPES and not _is_attestation(e)
    ]  # fmt: skip
    if not children:
        raise UnsupportedArtifactError(f"{what}: the index names no image manifest")
    if len(children) > 1:
        listed = ", ".join(str(c.get("digest"))[:80] for c in children[:5])
        raise UnsupportedArtifactError(
            f"{what}: the index names {len(children)} manifests ({listed}); "
            "name one by digest: oci://host/repository@sha256:…"
        )
    digest = children[0].get("digest")
    if not isinstance(digest, str) or not _DIGEST.match(digest):
        raise UnsupportedArtifactError(f"{what}: the index names a malformed digest")
    return digest


def _blob_of(layer: object, what: str) -> Blob:
    """One layer descriptor as a file; refused without a safe title or a sound digest."""
    if not isinstance(layer, dict):
        raise UnsupportedArtifactError(f"{what}: a layer is not a descriptor object")
    digest, size = layer.get("digest"), layer.get("size")
    if not isinstance(digest, str) or not _DIGEST.match(digest):
        raise UnsupportedArtifactError(f"{what}: a layer has a malformed digest")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise UnsupportedArtifactError(f"{what}: layer {digest} has no valid size")
    annotations = layer.get("annotations") or {}
    title = annotations.get(TITLE) if isinstance(annotations, dict) else None
    if not isinstance(title, str) or not title:
        raise UnsupportedArtifactError(
            f"{what}: layer {digest} has no {TITLE} annotation, so it names no file "
            "(a container image, not a model pushed with 'oras push')"
        )
    if str(annotations.get(UNPACK, "")).lower() == "true":
        raise UnsupportedArtifactError(
            f"{what}: layer {title[:80]!r} is a packed directory; push its files one by one"
        )
    return Blob(digest, size, safe_relative_path(title))


def model_blobs(doc: dict[str, Any], media_type: str, what: str) -> list[Blob]:
    """Every layer of a manifest as a file, titles unique and never a file's own folder."""
    layers = doc.get("blobs" if media_type == OCI_ARTIFACT else "layers")
    if not isinstance(layers, list):
        raise UnsupportedArtifactError(f"{what}: the manifest lists no layers")
    blobs = [_blob_of(layer, what) for layer in layers]
    paths = {b.path for b in blobs}
    if len(paths) != len(blobs):
        raise UnsafePathError(f"{what}: two layers have the same title")
    for path in paths:
        parts = path.split("/")
        for depth in range(1, len(parts)):
            if "/".join(parts[:depth]) in paths:
                raise UnsafePathError(f"{what}: {path!r} lies inside another layer's file")
    return blobs


def wanted(blobs: list[Blob], *, ignore_weights: bool) -> list[Blob]:
    """The blobs to download, in path order, without weights when ``ignore_weights``."""
    chosen = [b for b in blobs if not (ignore_weights and is_weight_file(b.path))]
    return sorted(chosen, key=lambda b: b.path)
