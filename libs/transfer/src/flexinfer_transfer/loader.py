"""The weight loader interface: one strategy that turns a model directory into tensors."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

import torch

from flexinfer_common.errors import NotFoundError


class NotApplicableError(NotFoundError):
    """This strategy cannot load this model (e.g. no files in its format): try the next one.

    It is a NotFoundError so a caller using one strategy alone still sees "not found".
    """


class WeightLoader(ABC):
    """One way of loading a model's weights (plain safetensors, P2P, node cache, ...)."""

    name: str
    """Registry name of the strategy, used in logs and load reports."""

    @abstractmethod
    def load(self, model_dir: Path, device: str) -> dict[str, torch.Tensor]:
        """All tensors of the model in ``model_dir``, placed on ``device``.

        Raises NotApplicableError when this strategy does not apply, TemporaryError when it
        may work later (the chain then falls back), and other FlexInferErrors otherwise.
        """
