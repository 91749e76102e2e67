"""The routing strategy interface and what a strategy may look at."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from flexinfer_common.bus.topics import EndpointInfo

Usable = Callable[[EndpointInfo], bool]
"""Whether an endpoint may take a request now (not cooling down, not unhealthy)."""


@dataclass(slots=True)
class RouteContext:
    """One request as routing sees it: raw headers and the JSON fields read (if any)."""

    headers: list[tuple[bytes, bytes]]
    body: dict[str, Any] | None

    def header(self, name: bytes) -> str | None:
        """The first value of the lower-case header ``name``, decoded as latin-1."""
        for key, value in self.headers:
            if key == name:
                return value.decode("latin-1")
        return None


class RoutingStrategy(ABC):
    """Chooses one of a model's endpoints for a request."""

    @abstractmethod
    def pick(
        self, model: str, endpoints: Sequence[EndpointInfo], usable: Usable, ctx: RouteContext
    ) -> EndpointInfo | None:
        """An endpoint from ``endpoints`` for which ``usable`` holds, or None."""


class LoadTracker:
    """Requests in flight per endpoint URL (for least-loaded)."""

    def __init__(self) -> None:
        self._load: dict[str, int] = {}

    def load(self, url: str) -> int:
        """Requests now open to ``url``."""
        return self._load.get(url, 0)

    def begin(self, url: str) -> None:
        """A request to ``url`` was opened."""
        self._load[url] = self._load.get(url, 0) + 1

    def end(self, url: str) -> None:
        """A request to ``url`` finished."""
        count = self._load.get(url, 0) - 1
        if count > 0:
            self._load[url] = count
        else:
            self._load.pop(url, None)


@dataclass(frozen=True, slots=True)
class StrategyDeps:
    """What strategy factories may use."""

    loads: LoadTracker
    prefix_index_size: int
    explicit_key_max: int
    system_segment_max: int
    document_segment_max: int
