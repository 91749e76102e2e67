"""What the load strategy chain needs from an inference engine (issue 14, point 10).

An engine implements three steps and the chain does the rest: a peer strategy READs into
the skeleton, a file strategy hands back tensors the engine adopts, and either way the
engine finishes with its own post-processing. One implementation per engine, in the
engine's package (the reference engine's is ``flexinfer_engine.core.transfer_adapter``).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn


class EngineAdapter(Protocol):
    """An engine's side of one weight load."""

    def build_skeleton(self) -> nn.Module:
        """The model with every tensor allocated on its device and in its final dtype,
        values undefined: a peer transport READs into these tensors. Called again for a
        fresh instance after a failed try may have half-written the previous one."""

    def apply_weights(self, tensors: dict[str, torch.Tensor]) -> None:
        """Adopt the loaded tensors (a file strategy's, or the skeleton's own after a peer
        pull) as the model's weights; raises when they do not fit the model."""

    def post_process(self) -> None:
        """Finish once the weights are in (tying, quantization processing, eval mode)."""
