"""RdmaStrategy: pull the weights from a live peer (NIXL P2P), the fastest source.

READY sources are filtered to this worker's rank and to a compatible accelerator before
they are ranked, so incompatible ones cannot use up the retry budget; at most
MAX_SOURCE_RETRIES are tried. A failed pull reinitialises a possibly written target and
tries the next candidate; when all fail the chain falls through to file loading.
"""

from __future__ import annotations

import logging
import time

from flexinfer_transfer.accelerators import MX_SOURCE_TYPE_WEIGHTS, accelerators_compatible
from flexinfer_transfer.errors import SourceTransferError
from flexinfer_transfer.loader import NotApplicableError
from flexinfer_transfer.metrics import TransferMetrics
from flexinfer_transfer.peer import PeerTransport
from flexinfer_transfer.selector import SelectionTarget, SourceCandidate, SourceSelector
from flexinfer_transfer.strategy import Availability, LoadContext, LoadResult, LoadStrategy

log = logging.getLogger(__name__)

MAX_SOURCE_RETRIES = 3
"""Sources tried per load: enough to get past a stale donor or two, bounded so a bad
listing cannot delay the file fallback for long."""


class RdmaStrategy(LoadStrategy):
    """Peer-to-peer weights through a transfer manager."""

    name = "rdma"

    def __init__(
        self,
        transport: PeerTransport | None,
        selector: SourceSelector,
        metrics: TransferMetrics,
    ) -> None:
        self.transport = transport
        self.selector = selector
        self.metrics = metrics

    def is_available(self, ctx: LoadContext) -> Availability:
        """Available when a transfer manager (NIXL) is configured."""
        if self.transport is None:
            return Availability.no("no peer transfer manager (NIXL) is configured")
        return Availability.yes()

    def candidates(self, ctx: LoadContext) -> list[SourceCandidate]:
        """The sources to try, in order, at most MAX_SOURCE_RETRIES."""
        assert self.transport is not None
        usable = [
            c
            for c in self.transport.list_sources(ctx)
            if c.worker_rank == ctx.worker_rank
            and (not ctx.source_id or c.mx_source_id == ctx.source_id)
            and accelerators_compatible(
                c.accelerator,
                ctx.accelerator,
                post_fetch=False,
                mx_source_type=MX_SOURCE_TYPE_WEIGHTS,
                quantization=ctx.quantization,
                dtype=ctx.dtype,
            )
        ]
        target = SelectionTarget(ctx.model_name, ctx.worker_rank, ctx.worker_id)
        return self.selector.order(usable, target)[:MAX_SOURCE_RETRIES]

    def load(self, ctx: LoadContext) -> LoadResult:
        """The tensors of the first candidate that delivers them."""
        assert self.transport is not None
        ordered = self.candidates(ctx)
        if not ordered:
            raise NotApplicableError(f"no compatible READY source for rank {ctx.worker_rank}")
        errors: list[str] = []
        for candidate in ordered:
            self.metrics.selections.labels(self.selector.name, candidate.key).inc()
            started = time.perf_counter()
            try:
                tensors = self.transport.receive(candidate, ctx)
            except SourceTransferError as exc:
                self._timed(started, "retry")
                errors.append(f"{candidate.key}: {exc}")
                self.metrics.source_failures.labels(_reason(exc)).inc()
                log.warning(
                    "pull from %s failed, trying the next source: %s",
                    candidate.key,
                    exc,
                    extra={"source": candidate.key, "reason": _reason(exc)},
                )
                ctx.reset_target()
                continue
            self._timed(started, "success")
            return LoadResult(tensors, candidate.key)
        raise SourceTransferError(f"all {len(ordered)} sources failed: {'; '.join(errors)}")

    def _timed(self, started: float, outcome: str) -> None:
        seconds = time.perf_counter() - started
        self.metrics.transfer_seconds.labels(self.selector.name, outcome).observe(seconds)


def _reason(exc: SourceTransferError) -> str:
    cause = exc.__cause__
    return type(cause).__name__ if cause is not None else type(exc).__name__
