"""``rendezvous_hash``: highest-random-weight hashing of target and candidate identities.

Different targets get different first choices without shared state, the order is stable
across restarts, and removing one source changes only the targets that ranked it first.
"""

from __future__ import annotations

from flexinfer_transfer.selector import (
    ScoredSelector,
    SelectionTarget,
    SourceCandidate,
    rendezvous_weight,
)


class RendezvousSelector(ScoredSelector):
    """Scores each candidate by its HRW weight with the target."""

    name = "rendezvous_hash"

    def score(self, candidate: SourceCandidate, target: SelectionTarget) -> float:
        """The pair's blake2b weight."""
        return float(rendezvous_weight(target, candidate))
