"""ArtifactSettings: serving and fetching artifacts (env ``FLEXINFER_TRANSFER_ARTIFACT_*``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from flexinfer_transfer.artifact_manifest import ArtifactLimits


class ArtifactSettings(BaseSettings):
    """Chunking, source buffers, retries and the limits a manifest must respect."""

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_TRANSFER_ARTIFACT_", extra="ignore")

    chunk_mib: int = Field(default=64, ge=1, le=4096)
    """MiB per chunk. 64: ModelExpress's default (MX_ARTIFACT_TRANSFER_CHUNK_SIZE), large
    enough that a READ's setup vanishes, small enough that a retry costs little."""
    source_slots: int = Field(default=4, ge=1, le=64)
    """Chunks a source holds prepared at once (registered DRAM of chunk_mib each). 4:
    ModelExpress targets keep up to 4 chunks in flight; more answer RESOURCE_EXHAUSTED."""
    lease_timeout_s: float = Field(default=120.0, gt=0)
    """Seconds a prepared chunk stays reserved for a target that never releases it (it
    died); one bounded READ (120 s in ModelExpress) fits."""
    chunk_attempts: int = Field(default=3, ge=1, le=10)
    """Tries per chunk on the target before the fetch gives up: a corrupt chunk is
    re-prepared and re-read; 3 rides out a transient fault without hiding a bad source."""
    max_total_gib: int = Field(default=64, ge=1)
    """Largest artifact accepted, served or installed: compile caches are MiB to a few
    GiB; a manifest beyond this is a bug or an attack, refused before any byte moves."""
    max_files: int = Field(default=100_000, ge=1)
    """Most files in one artifact (Triton caches hold thousands of small files)."""
    transfer_timeout_s: float = Field(default=120.0, gt=0)
    """Longest one chunk READ or RPC may take before the source counts as gone."""

    @property
    def chunk_bytes(self) -> int:
        """Bytes per chunk."""
        return self.chunk_mib << 20

    def limits(self) -> ArtifactLimits:
        """The manifest limits."""
        return ArtifactLimits(self.max_total_gib << 30, self.max_files, 4 << 30)
