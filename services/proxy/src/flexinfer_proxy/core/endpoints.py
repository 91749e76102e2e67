"""Ready endpoints per model: event and store updates, round-robin picks, cooldowns."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from flexinfer_common.bus.topics import EndpointInfo, EndpointsEvent
from flexinfer_common.store import EndpointRecord


@dataclass
class _EndpointSet:
    endpoints: list[EndpointInfo] = field(default_factory=list)
    revision: int = -1
    updated_at: float = float("-inf")
    """When an event last set this (monotonic): store reads started earlier are stale."""
    cursor: int = 0
    out_until: dict[str, float] = field(default_factory=dict)


class EndpointTable:
    """The ready endpoints of every model, with a round-robin cursor per model."""

    def __init__(
        self,
        *,
        cooldown_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        on_available: Callable[[str], None] | None = None,
    ) -> None:
        self._sets: dict[str, _EndpointSet] = {}
        self._cooldown_s = cooldown_s
        self._clock = clock
        self._on_available = on_available

    def revision(self, model: str) -> int:
        """The newest revision applied for ``model`` (-1 when none)."""
        entry = self._sets.get(model)
        return entry.revision if entry else -1

    def urls(self, model: str) -> list[str]:
        """URLs of the model's ready endpoints (including ones cooling down)."""
        entry = self._sets.get(model)
        return [e.url for e in entry.endpoints] if entry else []

    def apply_event(self, event: EndpointsEvent) -> bool:
        """Apply an endpoints event; False when it is older than what is known."""
        entry = self._sets.setdefault(event.model, _EndpointSet())
        if event.revision < entry.revision:
            return False
        entry.revision = event.revision
        entry.updated_at = self._clock()
        # A new revision is fresh news about every endpoint: forget the cooldowns.
        entry.out_until.clear()
        self._replace(event.model, entry, [e for e in event.endpoints if e.ready])
        return True

    def apply_records(
        self, records: Iterable[EndpointRecord], read_started: float, models: Iterable[str]
    ) -> None:
        """Apply a store read of ``models``' endpoints begun at ``read_started``."""
        grouped: dict[str, list[EndpointInfo]] = {m: [] for m in models}
        for rec in records:
            if rec.ready and rec.model in grouped:
                info = EndpointInfo(url=rec.url, replica=rec.replica, ready=True, node=rec.node)
                grouped[rec.model].append(info)
        for model, infos in grouped.items():
            entry = self._sets.setdefault(model, _EndpointSet())
            if entry.updated_at > read_started:
                continue  # an event arrived while we were reading: it is newer
            self._replace(model, entry, sorted(infos, key=lambda e: e.replica))

    def forget_only(self, models: Iterable[str]) -> None:
        """Drop the endpoints of ``models`` (deleted Models)."""
        for model in models:
            self._sets.pop(model, None)

    def pick(self, model: str) -> EndpointInfo | None:
        """The next usable endpoint of ``model`` in round-robin order, if any."""
        entry = self._sets.get(model)
        if entry is None or not entry.endpoints:
            return None
        now = self._clock()
        count = len(entry.endpoints)
        for step in range(count):
            candidate = entry.endpoints[(entry.cursor + step) % count]
            until = entry.out_until.get(candidate.url)
            if until is not None and until > now:
                continue
            entry.cursor = (entry.cursor + step + 1) % count
            return candidate
        return None

    def usable(self, model: str) -> bool:
        """Whether ``model`` has an endpoint that is not cooling down."""
        entry = self._sets.get(model)
        if entry is None:
            return False
        now = self._clock()
        return any(entry.out_until.get(e.url, now) <= now for e in entry.endpoints)

    def mark_out(self, model: str, url: str) -> float:
        """Skip ``url`` for the cooldown; returns seconds until it is tried again."""
        entry = self._sets.get(model)
        if entry is not None:
            entry.out_until[url] = self._clock() + self._cooldown_s
        return self._cooldown_s

    def _replace(self, model: str, entry: _EndpointSet, endpoints: list[EndpointInfo]) -> None:
        entry.endpoints = endpoints
        live = {e.url for e in endpoints}
        entry.out_until = {u: t for u, t in entry.out_until.items() if u in live}
        if endpoints and self._on_available is not None:
            # Notify on every non-empty update, not only empty -> non-empty: waiters may
            # exist while endpoints are cooling down and a new set can serve them.
            self._on_available(model)
