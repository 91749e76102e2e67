"""TransferSettings: how weights are loaded (env prefix ``FLEXINFER_TRANSFER_``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from flexinfer_transfer.posix_reader import ReaderSettings
from flexinfer_transfer.strategy_registry import DEFAULT_ORDER


class TransferSettings(BaseSettings):
    """The load strategy chain, source selection and the file reader."""

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_TRANSFER_", extra="ignore")

    strategies: list[str] = Field(default_factory=lambda: list(DEFAULT_ORDER))
    """Strategy names in priority order; unavailable ones are skipped with a reason."""
    selector: str = "random"
    """Source ordering policy, ModelExpress's MX_P2P_SOURCE_SELECTOR: random (its default,
    kept), rendezvous_hash or load_aware; an unknown name falls back to random, logged."""
    read_threads: int = Field(default=2, ge=1, le=64)
    """Threads filling a file buffer. 2: one per core on the 2-core machines measured
    (3.1 GB/s against 2.0 for one); more threads than cores only contend."""
    read_chunk_mib: int = Field(default=16, ge=1, le=1024)
    """MiB per read call: large enough that syscall cost vanishes, small enough that the
    threads stay balanced over one file."""
    hugepages: bool = False
    """Ask for transparent huge pages for file buffers. Off: it cuts page faults 512-fold
    where granted, but compaction stalls made it unstable on the VMs measured."""
    prefault_cold: bool = True
    """A file the page cache lacks is read by one sequential reader while another thread
    faults its buffer in ahead (madvise POPULATE_WRITE), overlapping the page faults with
    the disk: 1.3x two self-faulting readers cold here (bench/RESULTS.md). Page-cached
    files keep the interleaved threads, which are about a tenth faster warm."""
    direct_reads: bool = False
    """Read chunks the page cache lacks with O_DIRECT, as runai-model-streamer does by
    default: ahead of buffered reads only while other work loaded the machine, level on a
    quiet one, and it leaves the file uncached for the next load on the node. Off."""

    peer_batch_mib: int = Field(default=256, ge=1, le=65536)
    """MiB per NIXL READ from a peer (NixlTransport's BATCH_BYTES): per-request cost
    vanishes above 64 MiB, and a dead donor is noticed between batches."""

    def reader(self) -> ReaderSettings:
        """The file reader's settings."""
        return ReaderSettings(
            self.read_threads,
            self.read_chunk_mib << 20,
            self.hugepages,
            self.direct_reads,
            self.prefault_cold,
        )
