"""Source selection: the order in which READY sources are tried (the selector only
orders; RdmaStrategy enforces the retry budget)."""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class SourceCandidate:
    """One worker of a READY source (what ListSources' SourceInstanceRef says)."""

    mx_source_id: str
    worker_id: str
    worker_rank: int = 0
    accelerator: str = ""
    source_load: float | None = None
    """In-flight reads the source reported through the registry; None = not reported."""

    @property
    def key(self) -> str:
        """The candidate's identity, as selection metrics label it."""
        return f"{self.mx_source_id}/{self.worker_id}"


@dataclass(frozen=True)
class SelectionTarget:
    """The worker that is loading: what a selector may score against."""

    model_name: str
    worker_rank: int
    worker_id: str

    @property
    def key(self) -> str:
        """The target's identity for hashing."""
        return f"{self.model_name}/{self.worker_rank}/{self.worker_id}"


class SourceSelector(ABC):
    """Orders candidates, best first."""

    name: str

    @abstractmethod
    def order(
        self, candidates: Sequence[SourceCandidate], target: SelectionTarget
    ) -> list[SourceCandidate]:
        """``candidates`` in the order they should be tried."""


class ScoredSelector(SourceSelector):
    """Orders by descending ``score``; ties keep the listing's order."""

    @abstractmethod
    def score(self, candidate: SourceCandidate, target: SelectionTarget) -> float:
        """Higher is tried first."""

    def order(
        self, candidates: Sequence[SourceCandidate], target: SelectionTarget
    ) -> list[SourceCandidate]:
        """Candidates by descending score."""
        return sorted(candidates, key=lambda c: -self.score(c, target))


def rendezvous_weight(target: SelectionTarget, candidate: SourceCandidate) -> int:
    """The HRW weight of a (target, candidate) pair: blake2b, stable across processes
    (Python's ``hash()`` is salted per process)."""
    digest = hashlib.blake2b(f"{target.key}\x00{candidate.key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")
