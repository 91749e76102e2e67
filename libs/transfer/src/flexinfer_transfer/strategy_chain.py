"""LoadStrategyChain: the strategies that apply, tried in order until one loads.

Unlike ModelExpress, no failure aborts the load: a strategy that raises anything (a stale
donor, a mismatched manifest, a corrupt file) is logged as one structured line, counted,
and the next strategy runs, after the target is reinitialised if the failed strategy may
have written into it. Only when every strategy has failed does the chain raise.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from flexinfer_common.errors import NotFoundError, PermanentError, TemporaryError
from flexinfer_transfer.loader import NotApplicableError
from flexinfer_transfer.metrics import TransferMetrics
from flexinfer_transfer.strategy import LoadContext, LoadStrategy

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


class LoadStrategyChain:
    """Runs strategies in priority order; the first that loads wins."""

    def __init__(self, strategies: Sequence[LoadStrategy], metrics: TransferMetrics) -> None:
        if not strategies:
            raise ValueError("a load strategy chain needs at least one strategy")
        self.strategies = list(strategies)
        self.metrics = metrics
        self.name = "strategies(" + ",".join(s.name for s in self.strategies) + ")"

    def run(self, ctx: LoadContext) -> LoadReport:
        """Load through the first strategy that is available and succeeds."""
        skipped: list[str] = []
        failures: list[Exception] = []
        for strategy in self.strategies:
            started = time.perf_counter()
            try:
                availability = strategy.is_available(ctx)
                if not availability.available:
                    self._fall_through(strategy, "unavailable", availability.reason, skipped)
                    continue
                result = strategy.load(ctx)
            except Exception as exc:  # any failure falls through (module docstring)
                reason = "not_applicable" if isinstance(exc, NotApplicableError) else "failed"
                self._fall_through(strategy, reason, f"{type(exc).__name__}: {exc}", skipped)
                failures.append(exc)
                if ctx.reset_target():
                    log.info("reinitialised the target after %s failed", strategy.name)
                continue
            seconds = time.perf_counter() - started
            self.metrics.loads.labels(strategy.name).inc()
            self.metrics.load_seconds.labels(strategy.name).observe(seconds)
            return LoadReport(result.tensors, strategy.name, seconds, skipped, result.source)
        raise _exhausted(ctx, skipped, failures)

    def _fall_through(
        self, strategy: LoadStrategy, reason: str, detail: str, skipped: list[str]
    ) -> None:
        skipped.append(f"{strategy.name}: {detail}")
        self.metrics.fallbacks.labels(strategy.name, reason).inc()
        level = logging.INFO if reason == "unavailable" else logging.WARNING
        log.log(
            level,
            "load strategy %s %s, trying the next: %s",
            strategy.name,
            reason,
            detail,
            extra={"strategy": strategy.name, "reason": reason, "detail": detail},
        )


def _exhausted(ctx: LoadContext, skipped: list[str], failures: list[Exception]) -> Exception:
    reasons = "; ".join(skipped)
    if all(isinstance(f, NotFoundError) for f in failures):
        return NotFoundError(f"no load strategy found weights in {ctx.model_dir}: {reasons}")
    real = [f for f in failures if not isinstance(f, NotFoundError)]
    if all(isinstance(f, TemporaryError) for f in real):
        return TemporaryError(f"every load strategy failed for {ctx.model_dir}: {reasons}")
    return PermanentError(f"every load strategy failed for {ctx.model_dir}: {reasons}")
