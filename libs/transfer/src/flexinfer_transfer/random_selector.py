"""``random``: a shuffle with a local RNG (the default, as in ModelExpress)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from flexinfer_transfer.selector import SelectionTarget, SourceCandidate, SourceSelector


class RandomSelector(SourceSelector):
    """Shuffles the candidates; a local RNG leaves the process-global one alone."""

    name = "random"

    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = rng or random.Random()

    def order(
        self, candidates: Sequence[SourceCandidate], target: SelectionTarget
    ) -> list[SourceCandidate]:
        """A random permutation."""
        shuffled = list(candidates)
        self.rng.shuffle(shuffled)
        return shuffled
