"""VRAM estimates made from a Model's files, where its spec sets no ``gpu.vramEstimateMB``.

Placement and the shared-GPU arbiter size a Model by ``gpu.vramEstimateMB``; a Model of
unknown size needs a GPU to itself. A backend that can tell from the model directory what
one replica needs (the reference engine: weights plus KV cache) fills that gap: the
planner learns the estimate once per spec generation, when the weights are in place, and
hands the reconcile's steps a copy of the Model carrying it. The stored spec is never
changed: an estimate is the controller's reading, not the user's declaration.
"""

from __future__ import annotations

from pathlib import Path

from flexinfer_common.api import Model
from flexinfer_common.api.model import GPUVendor
from flexinfer_controller.backends import Backend


class VramEstimates:
    """Each Model's estimate (MiB) from its files, by the spec generation it was made for."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[int, int]] = {}

    def learn(self, model: Model, backend: Backend, model_dir: Path | None) -> None:
        """Estimate ``model`` from ``model_dir`` once per generation (not when its spec
        sets one, it runs on the CPU, or the directory is not known yet)."""
        gpu = model.spec.gpu_or_default
        if model_dir is None or gpu.vram_estimate_mb is not None or gpu.vendor is GPUVendor.CPU:
            return
        generation = model.metadata.generation or 1
        known = self._known.get(model.key)
        if known is not None and known[0] == generation:
            return
        estimate = backend.vram_estimate_mb(model_dir)
        if estimate is not None:
            self._known[model.key] = (generation, estimate)

    def apply(self, model: Model) -> Model:
        """``model``, with the estimate learnt for its generation where its spec has none."""
        known = self._known.get(model.key)
        gpu = model.spec.gpu_or_default
        if known is None or known[0] != (model.metadata.generation or 1):
            return model
        if gpu.vram_estimate_mb is not None:
            return model
        sized = gpu.model_copy(update={"vram_estimate_mb": known[1]})
        return model.model_copy(update={"spec": model.spec.model_copy(update={"gpu": sized})})

    def forget(self, key: str) -> None:
        """The Model is gone."""
        self._known.pop(key, None)
