"""The engine as a source for its peers: its loaded weights served over NIXL.

While the engine is awake, a libs/transfer PeerSource registers the model's memory, serves
the WorkerService and (with a registry) publishes and heartbeats; before the weights are
freed (sleep, shutdown) it is withdrawn: STALE, readers drained, memory deregistered.
"""

from __future__ import annotations

from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_engine.core.engine import InferenceEngine
from flexinfer_transfer.peer_source import PeerSource, PeerSourceSettings, SourceRole


class EnginePeerSource:
    """Starts and stops a PeerSource over ``engine.model`` (the runner calls both)."""

    def __init__(
        self,
        engine: InferenceEngine,
        identity: SourceIdentity,
        settings: PeerSourceSettings,
        worker_id: str,
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.role = SourceRole(identity, worker_id, accelerator=engine.device.type)
        self.source: PeerSource | None = None

    def start(self) -> None:
        """Serve the weights (no-op unless loaded and awake, or when already serving)."""
        if self.source is None and self.engine.loaded and not self.engine.sleep_level:
            self.source = PeerSource(self.engine.model, self.role, self.settings)

    def stop(self) -> None:
        """Withdraw before the weights are freed."""
        if self.source is not None:
            source, self.source = self.source, None
            source.stop()
