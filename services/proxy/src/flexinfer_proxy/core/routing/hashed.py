"""``session-affinity`` and ``prefix``: a routing key hashed onto a CRC32 ring."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

from flexinfer_common.bus.topics import EndpointInfo
from flexinfer_proxy.core.routing.base import RouteContext, RoutingStrategy, StrategyDeps, Usable
from flexinfer_proxy.core.routing.default import RoundRobin
from flexinfer_proxy.core.routing.keys import prefix_key, session_key
from flexinfer_proxy.core.routing.ring import HashRing


class _RingStrategy(RoutingStrategy):
    """Requests with the same key go to the same endpoint while it stays usable."""

    def __init__(self, deps: StrategyDeps) -> None:
        self.deps = deps
        self._rings: dict[str, HashRing] = {}
        self._fallback = RoundRobin()

    def key(self, ctx: RouteContext) -> str | None:
        """The request's routing key; None routes round-robin."""
        raise NotImplementedError

    def ring(self, model: str, endpoints: Sequence[EndpointInfo]) -> HashRing:
        """The model's ring, rebuilt only when its endpoint set changed."""
        ring = self._rings.get(model)
        urls = frozenset(e.url for e in endpoints)
        if ring is None or ring.members != urls:
            ring = self._rings[model] = HashRing(sorted(urls))
        return ring

    def pick(
        self, model: str, endpoints: Sequence[EndpointInfo], usable: Usable, ctx: RouteContext
    ) -> EndpointInfo | None:
        """The endpoint owning the request's key on the ring."""
        key = self.key(ctx)
        if key is None or not endpoints:
            return self._fallback.pick(model, endpoints, usable, ctx)
        by_url = {e.url: e for e in endpoints}
        url = self.locate(model, key, endpoints, lambda u: usable(by_url[u]))
        return by_url[url] if url is not None else None

    def locate(
        self, model: str, key: str, endpoints: Sequence[EndpointInfo], usable: Callable[[str], bool]
    ) -> str | None:
        """The URL for ``key``."""

        return self.ring(model, endpoints).lookup(key, usable)


class SessionAffinity(_RingStrategy):
    """X-Session-ID > X-Conversation-ID > body session_id > hash of the first 5 messages."""

    def key(self, ctx: RouteContext) -> str | None:
        """The session key."""
        return session_key(ctx, self.deps.explicit_key_max)


class PrefixRouting(_RingStrategy):
    """Requests sharing a prompt prefix share an engine (and its prefix cache).

    Assignments are remembered in an LRU index of bounded size, so a prefix stays on its
    engine (its cache stays warm) even when the ring later changes.
    """

    def __init__(self, deps: StrategyDeps) -> None:
        super().__init__(deps)
        self.index: OrderedDict[tuple[str, str], str] = OrderedDict()

    def key(self, ctx: RouteContext) -> str | None:
        """The prefix key."""
        d = self.deps
        return prefix_key(ctx, d.explicit_key_max, d.system_segment_max, d.document_segment_max)

    def locate(
        self, model: str, key: str, endpoints: Sequence[EndpointInfo], usable: Callable[[str], bool]
    ) -> str | None:
        """The remembered URL for the prefix if still usable, else the ring's."""

        slot = (model, key)
        known = self.index.get(slot)
        if known is not None and any(e.url == known for e in endpoints) and usable(known):
            self.index.move_to_end(slot)
            return known
        url = super().locate(model, key, endpoints, usable)
        if url is not None:
            self.index[slot] = url
            self.index.move_to_end(slot)
            while len(self.index) > self.deps.prefix_index_size:
                self.index.popitem(last=False)
        return url
