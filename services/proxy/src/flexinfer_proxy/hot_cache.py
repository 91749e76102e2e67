"""Per-model values the hot path needs on every request, computed once per model version.

``labels()`` on a Prometheus metric takes a lock and builds a key per call, and a model's
activity interval and wait budget rebuild pydantic defaults: a few µs each per request.
The catalog hands out the same Model object until the model changes, so values are kept
against that object's identity.
"""

from __future__ import annotations

from flexinfer_common.api import Model
from flexinfer_proxy.core.service import ProxyCore


class HotCache:
    """Timing values by Model object."""

    def __init__(self, core: ProxyCore) -> None:
        self.core = core
        self._timings: dict[str, tuple[Model, float, float]] = {}

    def timings(self, model: Model) -> tuple[float, float]:
        """``(activity interval, wait budget)`` in seconds for ``model``."""
        key = model.key
        cached = self._timings.get(key)
        if cached is None or cached[0] is not model:
            core = self.core
            cached = (model, core.activity_interval(model), core.wait_budget(model))
            self._timings[key] = cached
        return cached[1], cached[2]
