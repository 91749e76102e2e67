"""LoRAAdapter sources on the kubernetes runtime: the engine's own paths only, for now.

A ``LocalPath`` adapter is loaded from its path inside the engine container: a directory
of the base Model's volume (mounted at ``/models``), or of the image. Fetching
``HuggingFace`` or ``OCI`` adapters into the base Model's cache volume (a Job like the
Model's prefetch) is not built: such adapters fail at once, saying so and what works.
"""

from __future__ import annotations

from flexinfer_common.api import LoRAAdapter
from flexinfer_controller.core.cache import CacheState
from flexinfer_controller.core.lora.roots import AdapterRoots
from flexinfer_controller.runtime.kubernetes.options import MODEL_MOUNT
from flexinfer_controller.settings import ControllerSettings

UNSUPPORTED = "SourceUnsupported"


def adapter_roots(settings: ControllerSettings) -> AdapterRoots:
    """The operator's roots (paths in the engine container) and the base Model's volume,
    which its own Model's spec put there; paths are compared as written (the controller
    does not see the container's filesystem)."""
    return AdapterRoots.of(settings.lora_roots, [MODEL_MOUNT])


class PathOnlyAdapterCache:
    """Refuses remote adapter sources with a reason that names the runtime."""

    def ensure(self, adapter: LoRAAdapter, source: str) -> CacheState:
        """Failed: the kubernetes runtime fetches no adapter."""
        kind = adapter.spec.source.type.value
        return CacheState.failed(
            UNSUPPORTED,
            f"the kubernetes runtime does not fetch {kind} adapters ({source}) yet: put the "
            "adapter's files where the engine can read them (the base Model's volume is "
            "mounted at /models) and use a LocalPath source with that path",
        )

    async def release(self, adapter: LoRAAdapter) -> None:
        """Nothing was fetched."""

    async def close(self) -> None:
        """Nothing runs."""
