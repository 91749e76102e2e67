"""The models this proxy serves, by every name a client may use, cached from the store.

Names resolve in this order: served names, then aliases, then LoRAAdapter objects
(``spec.adapterName`` -> ``spec.modelRef`` in the adapter's namespace), then the
``flexinfer.ai/lora-adapters`` annotation, then service labels. The first claimant of a
name (by key) wins it, so the index never depends on the order the store returns.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from flexinfer_common.api import LoRAAdapter, Model
from flexinfer_common.errors import NotFoundError
from flexinfer_common.store import ModelStore
from flexinfer_proxy.core.errors import ModelNotFoundError

log = logging.getLogger(__name__)

_MAX_MISS_ENTRIES = 10_000

SERVICE_LABELS_ANNOTATION = "flexinfer.ai/service-labels"
LORA_ANNOTATION = "flexinfer.ai/lora-adapters"
UPSTREAM_MODEL_ANNOTATION = "flexinfer.ai/upstream-model"
"""The ``model`` an external endpoint expects, when it is not the Model's served name
(``flexinfer proxy --static NAME=URL#served-name`` sets it)."""


@dataclass(frozen=True, slots=True)
class Target:
    """What a request's model name resolves to: the Model, and the name the engine is sent."""

    model: Model
    upstream_name: str
    """The served name for names and aliases; the adapter name for a LoRA adapter (vLLM
    selects the adapter by the request's ``model`` field)."""
    adapter: LoRAAdapter | None = None
    """The LoRAAdapter object the name is, as last read: a request waits until its status
    says Loaded (the controller loads it into the engines on demand)."""
    key: str = field(init=False)
    """``model.key``, computed once: the hot path uses it several times per request."""
    renamed: bool = field(init=False)
    """``upstream_name`` is not the Model's served name (a LoRA adapter, or the Model's
    upstream-model annotation): it is sent as it is, never replaced by what an endpoint
    says it serves."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", self.model.key)
        object.__setattr__(self, "renamed", self.upstream_name != self.model.served_names[0])


class AdapterBaseMissingError(ModelNotFoundError):
    """The name is a LoRAAdapter's, but its base Model does not exist (HTTP 404)."""

    def __init__(self, name: str, base: str) -> None:
        NotFoundError.__init__(
            self,
            f"The model '{name}' is a LoRA adapter of Model '{base}', which does not exist",
        )
        self.name = name
        self.base = base


def _csv(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def service_labels(model: Model) -> list[str]:
    """spec.serviceLabels plus the ``flexinfer.ai/service-labels`` annotation."""
    labels = list(model.spec.service_labels or [])
    labels += _csv(model.metadata.annotations.get(SERVICE_LABELS_ANNOTATION))
    return list(dict.fromkeys(labels))


def upstream_name(model: Model) -> str:
    """The ``model`` its engine is sent: the served name, unless the Model names another."""
    return model.metadata.annotations.get(UPSTREAM_MODEL_ANNOTATION) or model.served_names[0]


def lora_adapters(model: Model) -> list[str]:
    """LoRA adapter names declared on the Model (``flexinfer.ai/lora-adapters``)."""
    return _csv(model.metadata.annotations.get(LORA_ANNOTATION))


def adapter_queue(adapter: LoRAAdapter) -> str:
    """The cold-start queue of requests waiting for ``adapter`` to be loaded:
    ``<namespace>/<model>:<adapterName>`` (no Model key has a colon)."""
    return f"{adapter.model_key}:{adapter.spec.adapter_name}"


def build_target_index(
    models: list[Model], adapters: Iterable[LoRAAdapter] = ()
) -> tuple[dict[str, Target], dict[str, list[Model]]]:
    """Names, aliases and adapters -> Targets; service labels -> the Models claiming them."""
    ordered = sorted(models, key=lambda m: m.key)
    index = {
        name: Target(model, upstream_name(model))
        for name, model in build_name_index(ordered).items()
    }
    by_key = {m.key: m for m in ordered}
    for adapter in sorted(adapters, key=lambda a: a.key):
        base = by_key.get(adapter.model_key)
        if base is not None:
            name = adapter.spec.adapter_name
            index.setdefault(name, Target(base, name, adapter))
    for model in ordered:
        for name in lora_adapters(model):
            index.setdefault(name, Target(model, name))
    labels: dict[str, list[Model]] = {}
    for model in ordered:
        for label in service_labels(model):
            if label not in index:
                labels.setdefault(label, []).append(model)
    return index, labels


def dangling_adapters(
    adapters: Iterable[LoRAAdapter], targets: dict[str, Target]
) -> dict[str, str]:
    """Adapter names no Target answers to (their base Model is missing) -> the base's key."""
    out: dict[str, str] = {}
    for adapter in sorted(adapters, key=lambda a: a.key):
        if adapter.spec.adapter_name not in targets:
            out.setdefault(adapter.spec.adapter_name, adapter.model_key)
    return out


def build_name_index(models: list[Model]) -> dict[str, Model]:
    """Map served names, then aliases, to Models; the first claimant (by key) wins a name."""
    ordered = sorted(models, key=lambda m: m.key)
    index: dict[str, Model] = {}
    # Primary names first, so another model's alias can never shadow a served name.
    for model in ordered:
        index.setdefault(model.served_names[0], model)
    for model in ordered:
        for name in model.served_names[1:]:
            index.setdefault(name, model)
    return index


class ModelCatalog:
    """Resolves request ``model`` names to Models of one namespace."""

    def __init__(
        self,
        store: ModelStore,
        namespace: str,
        *,
        miss_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[dict[str, Model], float], None] | None = None,
        is_ready: Callable[[str], bool] | None = None,
    ) -> None:
        self._store = store
        self._namespace = namespace
        self._miss_interval_s = miss_interval_s
        self._clock = clock
        self._on_change = on_change
        self._is_ready = is_ready
        self._targets: dict[str, Target] = {}
        self._labels: dict[str, list[Model]] = {}
        self._index: dict[str, Model] = {}
        self._by_key: dict[str, Model] = {}
        self._adapters: list[LoRAAdapter] = []
        self._dangling: dict[str, str] = {}
        self._misses: dict[str, float] = {}
        self._refreshing: asyncio.Task[None] | None = None
        self.loaded = False

    @property
    def models(self) -> list[Model]:
        """Every declared Model, ordered by key."""
        return sorted(self._by_key.values(), key=lambda m: m.key)

    def get(self, key: str) -> Model | None:
        """The Model with this namespace/name key, if known."""
        return self._by_key.get(key)

    def lookup(self, name: str) -> Model | None:
        """The Model a name resolves to in the cache, without touching the store."""
        return self._index.get(name)

    def lookup_target(self, name: str) -> Target | None:
        """Name, alias or adapter first; then a service label (preferring a ready model)."""
        target = self._targets.get(name)
        if target is not None:
            return target
        claimants = self._labels.get(name)
        if not claimants:
            return None
        ready = self._is_ready
        chosen = next((m for m in claimants if ready is not None and ready(m.key)), claimants[0])
        return Target(chosen, upstream_name(chosen))

    async def resolve(self, name: str) -> Model | None:
        """The Model for ``name``; on a miss, re-read the store (throttled per name)."""
        target = await self.resolve_target(name)
        return target.model if target is not None else None

    @property
    def adapters(self) -> list[LoRAAdapter]:
        """The LoRAAdapters of the namespace, as last read, ordered by key."""
        return list(self._adapters)

    async def resolve_target(self, name: str) -> Target | None:
        """The Target for ``name``; on a miss, re-read the store (throttled per name).

        Raises AdapterBaseMissingError when ``name`` is a LoRAAdapter's whose base Model
        does not exist, so the client learns why rather than only that nothing matched.
        """
        target = self.lookup_target(name)
        if target is not None:
            return target
        now = self._clock()
        last = self._misses.get(name)
        if last is None or now - last >= self._miss_interval_s:
            if len(self._misses) >= _MAX_MISS_ENTRIES:
                self._prune_misses(now)
            self._misses[name] = now
            await self.refresh()
            target = self.lookup_target(name)
            if target is not None:
                return target
        base = self._dangling.get(name)
        if base is not None:
            raise AdapterBaseMissingError(name, base)
        return None

    async def refresh(self) -> None:
        """Re-read every Model of the namespace; concurrent callers share one read."""
        task = self._refreshing
        if task is None or task.done():
            task = asyncio.create_task(self._load(), name="proxy-models-refresh")
            self._refreshing = task
        await asyncio.shield(task)

    def apply(
        self,
        models: list[Model],
        adapters: list[LoRAAdapter] | None = None,
        read_started: float | None = None,
    ) -> None:
        """Replace the cached models, and the adapters unless None (keeps the last read).

        ``read_started``: when the store read began (monotonic), so that news which came
        by event since then is not overwritten by this older view.
        """
        # A Model being deleted serves no one, even while its finalizer holds the record.
        ours = [
            m
            for m in models
            if m.metadata.namespace == self._namespace and m.metadata.deletion_timestamp is None
        ]
        if adapters is not None:
            # An adapter being deleted is being unloaded: its name serves no one any more.
            self._adapters = sorted(
                (
                    a
                    for a in adapters
                    if a.metadata.namespace == self._namespace
                    and a.metadata.deletion_timestamp is None
                ),
                key=lambda a: a.key,
            )
        self._index = build_name_index(ours)
        self._targets, self._labels = build_target_index(ours, self._adapters)
        self._dangling = dangling_adapters(self._adapters, self._targets)
        self._by_key = {m.key: m for m in ours}
        self.loaded = True
        if self._on_change is not None:
            started = time.monotonic() if read_started is None else read_started
            self._on_change(self._by_key, started)

    async def _load(self) -> None:
        started = time.monotonic()
        models, adapters = await asyncio.gather(
            self._store.list_models(self._namespace), self._store.list_adapters(self._namespace)
        )
        self.apply(models, adapters, started)

    def _prune_misses(self, now: float) -> None:
        stale = [n for n, t in self._misses.items() if now - t >= self._miss_interval_s]
        for name in stale:
            del self._misses[name]
        if len(self._misses) >= _MAX_MISS_ENTRIES:
            # Every entry is fresh: a flood of distinct names. Forget them all rather than
            # grow without bound; the per-name throttle then restarts.
            self._misses.clear()
