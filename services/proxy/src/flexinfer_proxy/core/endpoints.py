"""Ready endpoints per model: event and store updates, external URLs, cooldowns, health."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from flexinfer_common.bus.topics import EndpointInfo, EndpointsEvent
from flexinfer_common.store import EndpointRecord
from flexinfer_proxy.core.routing.base import RouteContext, RoutingStrategy
from flexinfer_proxy.core.routing.default import RoundRobin

_NO_CONTEXT = RouteContext(headers=[], body=None)


@dataclass
class _EndpointSet:
    endpoints: list[EndpointInfo] = field(default_factory=list)
    revision: int = -1
    updated_at: float = float("-inf")
    """When an event last set this (monotonic): store reads started earlier are stale."""
    out_until: dict[str, float] = field(default_factory=dict)
    unhealthy: set[str] = field(default_factory=set)
    external: bool = False
    leaving: set[tuple[str, str]] = field(default_factory=set)
    """(replica, url) the last event marked terminating: store reads cannot tell."""
    blocked: str | None = None
    """Why the controller says the model cannot get an endpoint now (None: it can)."""
    served: dict[str, str] = field(default_factory=dict)
    """url -> the one model an external endpoint lists in its /v1/models."""
    says_adapters: bool = False
    """The controller's events say which adapters each endpoint holds (EndpointInfo.adapters):
    an endpoint known only from the store holds none until an event says otherwise."""


def routable(info: EndpointInfo) -> bool:
    """Ready, and not on a node being reclaimed (spot termination)."""
    return info.ready and not info.terminating


Serves = Callable[[EndpointInfo], bool]
"""Which endpoints may take a request (one for a LoRA adapter: those that hold it)."""


def serving_adapter(name: str, loaded: bool) -> Serves:
    """Endpoints that serve LoRA adapter ``name``: those that say they hold it; one that
    does not say (a controller that predates EndpointInfo.adapters) once the adapter's
    status says ``loaded`` (on every ready replica)."""

    def serves(info: EndpointInfo) -> bool:
        return loaded if info.adapters is None else name in info.adapters

    return serves


class EndpointTable:
    """The routable endpoints of every model, with per-endpoint cooldowns and health."""

    def __init__(
        self,
        *,
        cooldown_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        on_available: Callable[[str], None] | None = None,
        on_blocked: Callable[[str, str], None] | None = None,
    ) -> None:
        self._sets: dict[str, _EndpointSet] = {}
        self._cooldown_s = cooldown_s
        self._clock = clock
        self._on_available = on_available
        self._on_blocked = on_blocked
        self._round_robin = RoundRobin()

    def revision(self, model: str) -> int:
        """The newest revision applied for ``model`` (-1 when none)."""
        entry = self._sets.get(model)
        return entry.revision if entry else -1

    def urls(self, model: str) -> list[str]:
        """URLs of the model's routable endpoints (including ones cooling down)."""
        entry = self._sets.get(model)
        return [e.url for e in entry.endpoints] if entry else []

    def endpoints(self, model: str) -> list[EndpointInfo]:
        """The model's routable endpoints (including ones cooling down)."""
        entry = self._sets.get(model)
        return entry.endpoints if entry else []

    def external(self) -> dict[str, list[str]]:
        """External models and their URLs (for the health checker)."""
        return {m: [e.url for e in s.endpoints] for m, s in self._sets.items() if s.external}

    def apply_event(self, event: EndpointsEvent) -> bool:
        """Apply an endpoints event; False when it is older than what is known."""
        entry = self._sets.setdefault(event.model, _EndpointSet())
        if entry.external or event.revision < entry.revision:
            return False
        entry.revision = event.revision
        entry.updated_at = self._clock()
        # A new revision is fresh news about every endpoint: forget the cooldowns.
        entry.out_until.clear()
        entry.leaving = {(e.replica, e.url) for e in event.endpoints if e.terminating}
        if event.endpoints:  # an empty set says nothing about adapters
            entry.says_adapters = any(e.adapters is not None for e in event.endpoints)
        self._replace(event.model, entry, [e for e in event.endpoints if routable(e)])
        self._set_blocked(event.model, entry, event.blocked)
        return True

    def served_name(self, model: str, url: str) -> str | None:
        """The model name external endpoint ``url`` serves, if it said so."""
        entry = self._sets.get(model)
        return entry.served.get(url) if entry is not None else None

    def set_served_name(self, model: str, url: str, name: str | None) -> None:
        """Record what an external endpoint's /v1/models listed (None: not one model)."""
        entry = self._sets.get(model)
        if entry is None:
            return
        if name is None:
            entry.served.pop(url, None)
        else:
            entry.served[url] = name

    def blocked(self, model: str) -> str | None:
        """Why ``model`` cannot get an endpoint now, as the controller last said."""
        entry = self._sets.get(model)
        return entry.blocked if entry is not None and not entry.endpoints else None

    def apply_states(self, blocked: dict[str, str | None], read_started: float) -> None:
        """Apply the blocking reasons of a store read of Models begun at ``read_started``
        (a proxy that started after the event still learns why a model cannot start)."""
        for model, reason in blocked.items():
            entry = self._sets.setdefault(model, _EndpointSet())
            if not entry.external and entry.updated_at <= read_started:
                self._set_blocked(model, entry, reason)

    def _set_blocked(self, model: str, entry: _EndpointSet, reason: str | None) -> None:
        newly = reason is not None and reason != entry.blocked
        entry.blocked = reason
        if newly and not entry.endpoints and self._on_blocked is not None:
            assert reason is not None
            self._on_blocked(model, reason)

    def apply_records(
        self, records: Iterable[EndpointRecord], read_started: float, models: Iterable[str]
    ) -> None:
        """Apply a store read of ``models``' endpoints begun at ``read_started``.

        Stored records do not say whether a node is being reclaimed: only endpoint events
        do. A replica the last event marked terminating stays out, or every resync would
        put it back into rotation until the next event.
        """
        grouped: dict[str, list[EndpointRecord]] = {m: [] for m in models}
        for rec in records:
            if rec.ready and rec.model in grouped:
                grouped[rec.model].append(rec)
        for model, recs in grouped.items():
            entry = self._sets.setdefault(model, _EndpointSet())
            if entry.external or entry.updated_at > read_started:
                continue  # external URLs come from the spec; a newer event wins
            infos = [_stored(rec, entry) for rec in recs]
            infos = [i for i in infos if (i.replica, i.url) not in entry.leaving]
            self._replace(model, entry, sorted(infos, key=lambda e: e.replica))

    def set_external(self, models: dict[str, list[str]]) -> None:
        """Models served by external URLs (spec.endpoints): exactly these, replacing any."""
        for key, entry in list(self._sets.items()):
            if entry.external and key not in models:
                del self._sets[key]
        for key, urls in models.items():
            entry = self._sets.get(key) or _EndpointSet()
            if not entry.external:
                entry = self._sets[key] = _EndpointSet(external=True)
            if [e.url for e in entry.endpoints] != urls:
                infos = [EndpointInfo(url=u, replica=f"external-{i}") for i, u in enumerate(urls)]
                self._replace(key, entry, infos)

    def forget_only(self, models: Iterable[str]) -> None:
        """Drop the endpoints of ``models`` (deleted Models)."""
        for model in models:
            self._sets.pop(model, None)

    def usable_check(self, model: str) -> Callable[[EndpointInfo], bool]:
        """A predicate: the endpoint is neither cooling down nor unhealthy."""
        entry = self._sets.get(model)
        if entry is None:
            return _never
        if not entry.out_until and not entry.unhealthy:
            return _always  # the common case: no per-endpoint lookups
        now = self._clock()
        out, sick = entry.out_until, entry.unhealthy

        def usable(info: EndpointInfo) -> bool:
            return info.url not in sick and out.get(info.url, now) <= now

        return usable

    def pick(
        self,
        model: str,
        strategy: RoutingStrategy | None = None,
        ctx: RouteContext | None = None,
        serves: Serves | None = None,
    ) -> EndpointInfo | None:
        """A usable endpoint of ``model`` chosen by ``strategy`` (round-robin by default);
        only among those that ``serves`` when given (a LoRA adapter's holders)."""
        entry = self._sets.get(model)
        if entry is None or not entry.endpoints:
            return None
        endpoints = entry.endpoints
        if serves is not None:
            endpoints = [e for e in endpoints if serves(e)]
            if not endpoints:
                return None
        chooser = strategy or self._round_robin
        return chooser.pick(model, endpoints, self.usable_check(model), ctx or _NO_CONTEXT)

    def serving(self, model: str, serves: Serves) -> bool:
        """Whether ``model`` has a usable endpoint that ``serves`` (an adapter's holders)."""
        entry = self._sets.get(model)
        if entry is None:
            return False
        check = self.usable_check(model)
        return any(serves(e) and check(e) for e in entry.endpoints)

    def usable(self, model: str) -> bool:
        """Whether ``model`` has an endpoint that is not cooling down or unhealthy."""
        entry = self._sets.get(model)
        if entry is None:
            return False
        check = self.usable_check(model)
        return any(check(e) for e in entry.endpoints)

    def mark_out(self, model: str, url: str) -> float:
        """Skip ``url`` for the cooldown; returns seconds until it is tried again."""
        entry = self._sets.get(model)
        if entry is not None:
            entry.out_until[url] = self._clock() + self._cooldown_s
        return self._cooldown_s

    def set_health(self, model: str, url: str, healthy: bool) -> None:
        """Record an active health check's verdict on ``url``."""
        entry = self._sets.get(model)
        if entry is None:
            return
        if healthy:
            was_sick = url in entry.unhealthy
            entry.unhealthy.discard(url)
            entry.out_until.pop(url, None)
            if was_sick and self._on_available is not None:
                self._on_available(model)
        else:
            entry.unhealthy.add(url)

    def _replace(self, model: str, entry: _EndpointSet, endpoints: list[EndpointInfo]) -> None:
        entry.endpoints = endpoints
        live = {e.url for e in endpoints}
        entry.out_until = {u: t for u, t in entry.out_until.items() if u in live}
        entry.unhealthy &= live
        if endpoints and self._on_available is not None:
            # Notify on every non-empty update, not only empty -> non-empty: waiters may
            # exist while endpoints are cooling down and a new set can serve them.
            self._on_available(model)


def _always(_: EndpointInfo) -> bool:
    return True


def _never(_: EndpointInfo) -> bool:
    return False


def _stored(rec: EndpointRecord, entry: _EndpointSet) -> EndpointInfo:
    """An endpoint from a store record, which does not say which adapters it holds: what
    the last event said of the same replica, else none when events say, else unknown."""
    adapters: list[str] | None = [] if entry.says_adapters else None
    for known in entry.endpoints:
        if (known.replica, known.url) == (rec.replica, rec.url):
            adapters = known.adapters
    return EndpointInfo(
        url=rec.url, replica=rec.replica, ready=True, node=rec.node, adapters=adapters
    )
