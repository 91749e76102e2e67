"""LoadWeightsAdapter: the EngineAdapter of engines whose models adopt checkpoint tensors
through their own ``load_weights`` (vLLM's and SGLang's model classes both do).

A file strategy's tensors carry checkpoint names and whole (unsharded) shapes; the model's
``load_weights`` maps them onto its fused, tensor-parallel parameters. A peer, by contrast,
READs the source's serving tensors, which the source's engine has already post-processed
(quantization repacking included), so the skeleton a peer writes into is post-processed
before the READ and not again after it, as ModelExpress's loaders do.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from flexinfer_transfer.discovery import adopt_hidden_tensors


class LoadWeightsAdapter:
    """EngineAdapter over a model factory and the engine's post-processing step."""

    def __init__(
        self,
        build: Callable[[], nn.Module],
        post_process: Callable[[nn.Module], None],
        skeleton_post_process: Callable[[nn.Module], None] | None = None,
    ) -> None:
        self._build = build
        self._post_process = post_process
        self._skeleton_post_process = skeleton_post_process or post_process
        """What ``load_weights`` would have done on top of ``post_process`` (SGLang's
        models finish inside it), for a skeleton that never sees ``load_weights``."""
        self.model: nn.Module | None = None
        """The model being loaded; after ``post_process``, the one to serve."""
        self._processed = False
        self.peer_loaded = False
        """Whether the weights came from a peer's memory rather than a checkpoint."""

    def build_skeleton(self) -> nn.Module:
        """A fresh model on its device, post-processed so its tensors have the layout a
        source serves; a peer READs into it."""
        self.model = self._build()
        self._finish(self.model, self._skeleton_post_process)
        return self.model

    def apply_weights(self, tensors: dict[str, torch.Tensor]) -> None:
        """A peer's tensors are the skeleton's own: nothing to do. A file's go through the
        model's ``load_weights`` into a fresh, unprocessed model."""
        if self.model is not None and self._processed and _is_state_of(tensors, self.model):
            self.peer_loaded = True
            return
        # A skeleton left over from a failed peer try is post-processed already; checkpoint
        # tensors need the unprocessed layout, so start from a fresh model.
        self.model = self._build()
        self._processed = False
        self.peer_loaded = False
        load_weights: Callable[..., object] = self.model.load_weights  # type: ignore[assignment]
        load_weights(iter(tensors.items()))

    def post_process(self) -> None:
        """The engine's post-processing, once (a peer-loaded skeleton had it already)."""
        if self.model is None:
            raise RuntimeError("post_process before any weights were applied")
        if not self._processed:
            self._finish(self.model, self._post_process)
        self.model.eval()

    def _finish(self, model: nn.Module, post_process: Callable[[nn.Module], None]) -> None:
        post_process(model)
        # Tensors post-processing leaves on plain attributes become buffers, so that a
        # source's manifest and a target skeleton's list the same tensors.
        adopt_hidden_tensors(model)
        self._processed = True


def _is_state_of(tensors: dict[str, torch.Tensor], model: nn.Module) -> bool:
    """Whether every tensor is one of the model's own (shares its storage)."""
    if not tensors:
        return False
    own = {t.data_ptr() for t in model.state_dict(keep_vars=True).values()}
    return all(t.data_ptr() in own for t in tensors.values())
