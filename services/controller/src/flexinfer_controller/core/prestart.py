"""The pre-start seam: a step between "the weights are in place" and "start an engine".

Local mode plugs the quantizer (spec.quantize) and then the flash loader in here (copy the
model to tmpfs, launch from the copy); a runtime without one uses ``NoPreStart``. The
reconciler calls ``prepare`` right before a replica starts, never on a reconcile that
starts nothing, and ``release`` once the Model is gone, so whatever the step left behind
for it is cleaned up with the Model. A step that raises ``PreStartRefusedError`` fails the
Model (its other errors count as a failed start, retried with the crash backoff).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from flexinfer_common.api import Model
from flexinfer_common.errors import PermanentError


class PreStart(Protocol):
    """Prepares a model directory for launch and cleans up after a deleted Model."""

    async def prepare(self, model: Model, model_dir: Path) -> Path:
        """The directory to launch ``model`` from (``model_dir`` itself when unchanged).

        Raises a FlexInferError the reconciler reports as the start's failure.
        """

    async def release(self, key: str) -> None:
        """Remove what ``prepare`` left for the Model ``key`` (namespace/name)."""


class NoPreStart:
    """Launch from the model directory as it is."""

    async def prepare(self, model: Model, model_dir: Path) -> Path:
        """``model_dir`` unchanged."""
        return model_dir

    async def release(self, key: str) -> None:
        """Nothing to clean up."""


class PreStartRefusedError(PermanentError):
    """A pre-start step refused the Model for good: it goes Failed, not crash-looping."""


class PreStartChain:
    """Steps in order, each preparing what the one before it returned."""

    def __init__(self, steps: Sequence[PreStart]) -> None:
        self._steps = list(steps)

    async def prepare(self, model: Model, model_dir: Path) -> Path:
        """``model_dir`` through every step."""
        for step in self._steps:
            model_dir = await step.prepare(model, model_dir)
        return model_dir

    async def release(self, key: str) -> None:
        """Every step's clean-up, last step first."""
        for step in reversed(self._steps):
            await step.release(key)
