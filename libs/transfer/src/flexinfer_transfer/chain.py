"""A chain of loader strategies tried in order, falling back when one does not apply."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from flexinfer_common.errors import NotFoundError, TemporaryError
from flexinfer_transfer.loader import NotApplicableError, WeightLoader

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadReport:
    """What a chain load produced, which strategy produced it, and how long it took."""

    tensors: dict[str, torch.Tensor]
    strategy: str
    seconds: float
    skipped: list[str] = field(default_factory=list)
    """``"name: reason"`` for every strategy that was tried first and fell back."""
    source: str = ""
    """Where the weights came from (a peer source id, a directory); empty when unknown."""


class LoaderChain(WeightLoader):
    """Tries each strategy in order; the first that loads wins.

    A strategy that raises NotApplicableError or TemporaryError hands over to the next one;
    any other error is a real failure of a strategy that applied, and propagates.
    """

    def __init__(self, strategies: Sequence[WeightLoader]) -> None:
        if not strategies:
            raise ValueError("a loader chain needs at least one strategy")
        self.strategies = list(strategies)
        self.name = "chain(" + ",".join(s.name for s in self.strategies) + ")"

    def load(self, model_dir: Path, device: str) -> dict[str, torch.Tensor]:
        """The tensors of the first strategy that applies."""
        return self.load_report(model_dir, device).tensors

    def load_report(self, model_dir: Path, device: str) -> LoadReport:
        """Load and say which strategy did it and how long it took."""
        skipped: list[str] = []
        temporary: TemporaryError | None = None
        for strategy in self.strategies:
            started = time.perf_counter()
            try:
                tensors = strategy.load(model_dir, device)
            except NotApplicableError as exc:
                skipped.append(f"{strategy.name}: {exc}")
                continue
            except TemporaryError as exc:
                log.warning("loader %s failed, trying the next: %s", strategy.name, exc)
                skipped.append(f"{strategy.name}: {exc}")
                temporary = exc
                continue
            seconds = time.perf_counter() - started
            return LoadReport(tensors, strategy.name, seconds, skipped)
        reasons = "; ".join(skipped)
        if temporary is not None:
            raise TemporaryError(
                f"no loader succeeded for {model_dir}: {reasons}", delay=temporary.delay
            )
        raise NotFoundError(f"no loader applies to {model_dir}: {reasons}")
