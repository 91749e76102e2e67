"""The reference engine's EngineAdapter: how libs/transfer's strategy chain loads it.

The skeleton is the engine's own (meta-device) model materialised on the device in the
config's dtype, so a peer READs straight into the tensors the engine will serve from;
file strategies' tensors (FP8 ones widened first) are assigned in their place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from flexinfer_engine.core.engine import InferenceEngine


class ReferenceEngineAdapter:
    """EngineAdapter over one InferenceEngine."""

    def __init__(self, engine: InferenceEngine) -> None:
        self.engine = engine

    def build_skeleton(self) -> nn.Module:
        """The engine's model with fresh, uninitialised storage on its device."""
        engine = self.engine
        # Every parameter gets new storage (after a failed pull the old, half-written one
        # is freed rather than written again) in the config's dtype. Done per tensor rather
        # than through Module.to/to_empty, whose per-parameter checks cost ~0.3 s on the
        # first load of the medium preset.
        for module in engine.model.modules():
            for name, param in list(module.named_parameters(recurse=False)):
                fresh = torch.empty(param.shape, dtype=engine.config.dtype, device=engine.device)
                setattr(module, name, nn.Parameter(fresh, requires_grad=param.requires_grad))
        return engine.model

    def apply_weights(self, tensors: dict[str, torch.Tensor]) -> None:
        """Assign the tensors (a peer pull's are the skeleton's own: a no-op swap)."""
        self.engine.assign_weights(tensors)

    def post_process(self) -> None:
        """Inference mode for every module; the reference model needs nothing else."""
        self.engine.model.eval()
