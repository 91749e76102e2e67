"""OCI registries (Harbor, GHCR, ECR, a distribution server...): model artifacts pushed as
files, one per layer, fetched through the OCI distribution API.

``oci://<host>[:port]/<repository>[:<tag>|@sha256:<digest>]`` (see :mod:`.oci_artifact`):
the manifest is fetched (following a one-model index), checked against the digest asked
for and the one the registry announces, then every layer blob is streamed into the file
its title names, hashed on the way and renamed into place only once its digest matches.
The resolved revision is the digest of the manifest named. Registries are reached over
https, plain http only for hosts in ``oci_insecure_registries``; authorization is
:mod:`.oci_auth`'s.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

import httpx

from flexinfer_registry.adapters.providers.http import make_client, translate_transport
from flexinfer_registry.adapters.providers.oci_artifact import (
    ACCEPT,
    INDEX_TYPES,
    MAX_MANIFEST_BYTES,
    Blob,
    OciReference,
    UnsupportedArtifactError,
    check_manifest_digest,
    manifest_digest,
    model_blobs,
    parse_manifest,
    parse_reference,
    pick_from_index,
    wanted,
)
from flexinfer_registry.adapters.providers.oci_auth import OciSession, read_credentials
from flexinfer_registry.core.providers.base import (
    ChecksumMismatchError,
    DownloadResult,
    FileInfo,
    ModelProvider,
    ProgressCallback,
    ProviderConfig,
)
from flexinfer_registry.core.providers.files import ProgressMeter, check_digest, target_path


class OciProvider(ModelProvider):
    """Model artifacts in OCI registries."""

    name = "oci"

    def __init__(self, config: ProviderConfig | None = None) -> None:
        self._config = config or ProviderConfig()

    async def check(self, model_name: str) -> None:
        """Refuse a malformed reference before anything is created."""
        parse_reference(model_name)

    async def download(
        self,
        model_name: str,
        revision: str | None,
        dest_dir: Path,
        *,
        ignore_weights: bool = False,
        progress: ProgressCallback | None = None,
    ) -> DownloadResult:
        """Fetch the manifest, then every layer it titles, each verified by its digest."""
        ref = parse_reference(model_name, revision)
        credentials = read_credentials(self._config.oci_auth_file, ref.host)
        async with make_client(self._config) as client:
            session = OciSession(
                client, ref.host, ref.repository,
                insecure=self._config.oci_insecure_registries, credentials=credentials,
            )  # fmt: skip
            resolved, blobs = await _resolve(session, ref)
            chosen = wanted(blobs, ignore_weights=ignore_weights)
            meter = ProgressMeter(progress, sum(b.size for b in chosen))
            files = [await _fetch_blob(session, blob, dest_dir, meter) for blob in chosen]
        return DownloadResult(resolved_revision=resolved, files=tuple(files))


async def _manifest(
    session: OciSession, reference: str, what: str
) -> tuple[str, dict[str, Any], str]:
    """(media type, document, digest) of one manifest, checked against its digests."""
    response = await session.get(f"manifests/{reference}", what, {"Accept": ACCEPT})
    try:
        body = bytearray()
        with translate_transport(what):
            async for block in response.aiter_bytes():
                body += block
                if len(body) > MAX_MANIFEST_BYTES:
                    raise UnsupportedArtifactError(f"{what}: the manifest is over 4 MiB")
    finally:
        await response.aclose()
    data = bytes(body)
    if reference.startswith(("sha256:", "sha512:")):
        check_manifest_digest(data, reference, what)
    announced = response.headers.get("docker-content-digest", "")
    if announced.startswith(("sha256:", "sha512:")):
        check_manifest_digest(data, announced, what)
    media_type, doc = parse_manifest(data, response.headers.get("content-type", ""), what)
    return media_type, doc, manifest_digest(data)


async def _resolve(session: OciSession, ref: OciReference) -> tuple[str, list[Blob]]:
    """The digest of the manifest ``ref`` names, and the files of the model it holds."""
    what = f"OCI manifest {ref}"
    media_type, doc, digest = await _manifest(session, ref.reference, what)
    if media_type in INDEX_TYPES:
        child = pick_from_index(doc, what)
        media_type, doc, _ = await _manifest(session, child, f"{what} -> {child}")
        if media_type in INDEX_TYPES:
            raise UnsupportedArtifactError(f"{what}: an index inside an index is not followed")
    return digest, model_blobs(doc, media_type, what)


async def _fetch_blob(
    session: OciSession, blob: Blob, dest_dir: Path, meter: ProgressMeter
) -> FileInfo:
    """Stream one blob into a fresh temporary file beside its target, renamed once verified.

    The temporary file is created exclusively under a random name, so it can never
    clobber another layer's file, and is removed on any failure: nothing unverified is
    ever left under a layer's title.
    """
    what = f"OCI blob {blob.path} ({blob.digest})"
    target = target_path(dest_dir, blob.path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(prefix=".oci-partial-", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            response = await session.get(f"blobs/{blob.digest}", what)
            try:
                digest = await _stream(response, out, blob, what, meter)
            finally:
                await response.aclose()
        check_digest(blob.path, blob.digest.partition(":")[0], digest, blob.digest)
        os.replace(partial, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
        raise
    return FileInfo(path=blob.path, size=blob.size, checksum=blob.digest)


async def _stream(
    response: httpx.Response, out: BinaryIO, blob: Blob, what: str, meter: ProgressMeter
) -> str:
    """Write the body to ``out`` and return its ``algorithm:hex`` digest; never past the
    size the manifest announced (a registry cannot fill the disk with a bigger blob)."""
    algorithm = blob.digest.partition(":")[0]
    hasher = hashlib.new(algorithm)
    size = 0
    with translate_transport(what):
        async for block in response.aiter_bytes():
            size += len(block)
            if size > blob.size:
                raise ChecksumMismatchError(f"{what}: longer than the {blob.size} bytes announced")
            out.write(block)
            hasher.update(block)
            meter.add(len(block))
    if size != blob.size:
        raise ChecksumMismatchError(f"{what}: {size} bytes, the manifest announced {blob.size}")
    return f"{algorithm}:{hasher.hexdigest()}"
