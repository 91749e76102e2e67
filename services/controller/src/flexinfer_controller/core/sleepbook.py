"""Which engines sleep, the host RAM they cost, and which to stop first: the sleep policy's
bookkeeping, on an injected clock (no runtime, no I/O). The budget is per node: sleepers
hold the host RAM of the node they run on (one node on the local runtime)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flexinfer_controller.core.sharing.clock import Clock

WEIGHT_SUFFIXES = frozenset({".safetensors", ".bin", ".pt", ".pth", ".gguf"})
"""Files whose bytes a level-1 sleep copies to host RAM."""
_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class SleepPolicy:
    """``SleepSettings`` as the reconcile core takes them (0 MiB: sleep is off)."""

    budget_mb: int = 0
    level: int = 1
    stop_after_s: float = 1800.0
    process_mb: int = 1024
    timeout_s: float = 120.0

    @property
    def on(self) -> bool:
        """Whether any engine may sleep."""
        return self.budget_mb > 0


@dataclass(frozen=True, slots=True)
class Sleeper:
    """One sleeping replica as the book counts it."""

    replica: str
    model: str
    cost_mb: int
    slept_at: float
    node: str | None = None


class SleepBook:
    """The sleepers, within a host-RAM budget; the least recently used is stopped first."""

    def __init__(self, policy: SleepPolicy, clock: Clock) -> None:
        self._policy = policy
        self._clock = clock
        self._sleepers: dict[str, Sleeper] = {}

    @property
    def used_mb(self) -> int:
        """Host RAM the sleepers hold now, on every node."""
        return sum(s.cost_mb for s in self._sleepers.values())

    def used_on(self, node: str | None) -> int:
        """Host RAM the sleepers on ``node`` hold now."""
        return sum(s.cost_mb for s in self._sleepers.values() if s.node == node)

    def __contains__(self, replica: object) -> bool:
        return replica in self._sleepers

    def admit(self, cost_mb: int, node: str | None = None) -> list[str] | None:
        """Room for one more sleeper of ``cost_mb`` on ``node``: the sleepers there to stop
        first, least recently used (longest asleep) first; None when it exceeds the whole
        budget."""
        budget = self._policy.budget_mb
        if not self._policy.on or cost_mb > budget:
            return None
        used, evict = self.used_on(node), []
        here = [s for s in self._sleepers.values() if s.node == node]
        for sleeper in sorted(here, key=lambda s: s.slept_at):
            if used + cost_mb <= budget:
                break
            evict.append(sleeper.replica)
            used -= sleeper.cost_mb
        return evict

    def add(self, replica: str, model: str, cost_mb: int, node: str | None = None) -> Sleeper:
        """``replica`` (on ``node``) went to sleep now."""
        sleeper = Sleeper(replica, model, cost_mb, self._clock.now(), node)
        self._sleepers[replica] = sleeper
        return sleeper

    def remove(self, replica: str) -> Sleeper | None:
        """``replica`` sleeps no more (woken, stopped or gone)."""
        return self._sleepers.pop(replica, None)

    def retain(self, replicas: set[str]) -> None:
        """Forget sleepers the runtime no longer has (an engine exited by itself)."""
        for gone in set(self._sleepers) - replicas:
            del self._sleepers[gone]

    def due(self, model: str) -> tuple[list[str], float | None]:
        """``model``'s sleepers past the second timeout, and the seconds until its next
        one is (None: no other sleeper)."""
        now, limit = self._clock.now(), self._policy.stop_after_s
        expired, waits = [], []
        for sleeper in self._sleepers.values():
            if sleeper.model != model:
                continue
            left = sleeper.slept_at + limit - now
            if left <= 0:
                expired.append(sleeper.replica)
            else:
                waits.append(left)
        return expired, min(waits, default=None)


def host_cost_mb(policy: SleepPolicy, model_dir: Path | None, vram_estimate_mb: int | None) -> int:
    """Host RAM a sleeping engine of this model holds: its weight files' size at level 1
    (``vram_estimate_mb`` where no directory is known, an over-estimate: it counts the KV
    cache too), plus the process."""
    if policy.level != 1:
        return policy.process_mb
    weights = _weights_mb(model_dir) if model_dir is not None else None
    if weights is None:
        weights = vram_estimate_mb or 0
    return weights + policy.process_mb


def _weights_mb(model_dir: Path) -> int | None:
    try:
        files = [p for p in model_dir.rglob("*") if p.suffix in WEIGHT_SUFFIXES and p.is_file()]
    except OSError:
        return None
    if not files:
        return None
    return -(-sum(p.stat().st_size for p in files) // _MIB)  # rounded up
