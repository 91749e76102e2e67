"""Finding and fetching an artifact from a live peer before building it locally.

The target lists READY sources of its model in the registry, keeps those publishing the
artifact identity it needs (the same ``mx_source_id``: same model, revision, torch version,
compile settings and cache type) on a compatible accelerator (generated code is strict
same-family), and fetches from up to MAX_SOURCES of them in random order, re-checking the
authoritative accelerator from GetMetadata first. Every failure becomes an
ArtifactTransferError whose ``reason`` the caller counts before it builds the cache itself.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import grpc

from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_transfer.accelerators import accelerators_compatible
from flexinfer_transfer.artifact_fetch import (
    ArtifactFetcher,
    ArtifactTransferError,
    FetchedArtifact,
)
from flexinfer_transfer.errors import RegistryAuthError
from flexinfer_transfer.registry_directory import RegistryDirectory
from flexinfer_transfer.selector import SourceCandidate
from flexinfer_transfer.strategy import LoadContext

MAX_SOURCES = 3
"""Sources tried before giving up (ModelExpress's MAX_SOURCE_RETRIES): a cache is rebuilt
locally in seconds to minutes, so a long hunt for a healthy donor does not pay."""


@dataclass(frozen=True)
class ArtifactNeed:
    """What the target needs: the artifact's identity, on this accelerator and rank."""

    identity: SourceIdentity
    accelerator: str
    worker_rank: int = 0


@dataclass(frozen=True)
class PeerArtifact:
    """An artifact fetched from a peer: what was installed and from whom."""

    fetched: FetchedArtifact
    source: str
    """``mx_source_id/worker_id`` of the donor."""


def candidates(directory: RegistryDirectory, need: ArtifactNeed) -> list[SourceCandidate]:
    """READY sources of exactly this artifact identity on a compatible accelerator."""
    ctx = LoadContext(
        model_dir=Path("."), model_name=need.identity.model_name, worker_rank=need.worker_rank
    )
    try:
        listed = directory.list_sources(ctx)
    except (grpc.RpcError, RegistryAuthError) as exc:
        raise ArtifactTransferError("registry", f"listing artifact sources failed: {exc}") from exc
    wanted = need.identity.mx_source_id
    found = [
        c
        for c in listed
        if c.mx_source_id == wanted
        and c.worker_rank == need.worker_rank
        and accelerators_compatible(
            c.accelerator,
            need.accelerator,
            post_fetch=False,
            mx_source_type=need.identity.mx_source_type,
        )
    ]
    random.shuffle(found)  # spread targets over donors
    return found


def fetch_from_peers(
    directory: RegistryDirectory, fetcher: ArtifactFetcher, need: ArtifactNeed, dest: Path
) -> PeerArtifact:
    """Install the artifact from the first donor that delivers it as ``dest``; raises
    ArtifactTransferError (``no_source`` when none is listed) with nothing installed."""
    found = candidates(directory, need)
    if not found:
        raise ArtifactTransferError(
            "no_source", f"no READY source of artifact {need.identity.mx_source_id}"
        )
    failures: list[ArtifactTransferError] = []
    for candidate in found[:MAX_SOURCES]:
        try:
            return PeerArtifact(
                _fetch_one(directory, fetcher, need, candidate, dest), candidate.key
            )
        except ArtifactTransferError as exc:
            failures.append(exc)
    summary = "; ".join(f"{c.key}: {e}" for c, e in zip(found, failures, strict=False))
    raise ArtifactTransferError(failures[-1].reason, f"every artifact source failed: {summary}")


def _fetch_one(
    directory: RegistryDirectory,
    fetcher: ArtifactFetcher,
    need: ArtifactNeed,
    candidate: SourceCandidate,
    dest: Path,
) -> FetchedArtifact:
    try:
        location = directory.artifact(candidate)
    except (LookupError, grpc.RpcError, RegistryAuthError) as exc:
        raise ArtifactTransferError("metadata", f"{candidate.key}: {exc}") from exc
    identity = need.identity
    if not accelerators_compatible(
        location.accelerator,
        need.accelerator,
        post_fetch=True,
        mx_source_type=identity.mx_source_type,
        quantization=identity.quantization,
        dtype=identity.dtype,
    ):
        raise ArtifactTransferError(
            "accelerator",
            f"{candidate.key} runs on {location.accelerator!r}, this worker on "
            f"{need.accelerator!r}: generated code stays within its accelerator family",
        )
    return fetcher.fetch(location.endpoint, candidate.mx_source_id, location.artifact_id, dest)
