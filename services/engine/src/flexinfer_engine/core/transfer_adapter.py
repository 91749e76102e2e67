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
        # A failed pull leaves real tensors behind: back to meta first, so every try gets
        # fresh storage and the old one is freed rather than written again.
        model = engine.model.to("meta").to(dtype=engine.config.dtype)
        engine.model = model.to_empty(device=engine.device)
        return engine.model

    def apply_weights(self, tensors: dict[str, torch.Tensor]) -> None:
        """Assign the tensors (a peer pull's are the skeleton's own: a no-op swap)."""
        self.engine.assign_weights(tensors)

    def post_process(self) -> None:
        """Inference mode for every module; the reference model needs nothing else."""
        self.engine.model.eval()
