"""What a reconcile decides for each adapter before it talks to the engines.

``base_of`` checks the base Model once (it exists, its backend has an adapter API and runs
with LoRA on); ``Planner.plan`` then checks each adapter (being deleted, its name taken,
a load the engine refused for this spec, its weights) and whether it is wanted on the
engines now: always with ``preload``, else once a request asked for it or an engine holds
it. Planning an adapter that can be fetched or loaded first writes its finalizer.
"""

from __future__ import annotations

from dataclasses import dataclass

from flexinfer_common.api import LoRAAdapter, LoRAAdapterPhase, Model
from flexinfer_common.errors import InvalidSpecError
from flexinfer_common.store import ModelStore
from flexinfer_controller.backends import AdapterEndpoints, BackendRegistry
from flexinfer_controller.core.cache import CacheState, CacheStatus
from flexinfer_controller.core.lora import finalizer
from flexinfer_controller.core.lora.demand import DemandNotes
from flexinfer_controller.core.lora.engines import EngineState
from flexinfer_controller.core.lora.roots import AdapterRoots
from flexinfer_controller.core.lora.sources import AdapterCache, resolve
from flexinfer_controller.core.lora.status import (
    AWAITING_REPLICAS,
    AWAITING_REQUEST,
    BACKEND_UNSUPPORTED,
    CACHING,
    EXTERNAL_MODEL,
    LORA_DISABLED,
    MODEL_NOT_FOUND,
    NAME_CONFLICT,
    Verdict,
)

PENDING, FAILED = LoRAAdapterPhase.PENDING, LoRAAdapterPhase.FAILED


@dataclass(frozen=True, slots=True)
class Base:
    """The base Model as its adapters see it."""

    key: str
    model: Model | None
    api: AdapterEndpoints | None
    """Where its engines load adapters; None when they cannot (``problem`` says why)."""
    problem: Verdict | None = None

    @property
    def generation(self) -> int:
        """The Model's generation (0: no Model)."""
        return (self.model.metadata.generation or 1) if self.model is not None else 0


def base_of(key: str, model: Model | None, backends: BackendRegistry) -> Base:
    """The base Model ``key`` (None: missing), and what keeps its adapters off its engines."""
    if model is None or model.metadata.deletion_timestamp is not None:
        message = f"Model {key} does not exist; the adapter is loaded once it does"
        return Base(key, None, None, Verdict(PENDING, MODEL_NOT_FOUND, message))
    if model.spec.is_external:
        message = (
            f"Model {key} is served by external endpoints (spec.endpoints): the controller "
            "loads nothing into them, and requests are forwarded with the adapter name"
        )
        return Base(key, model, None, Verdict(PENDING, EXTERNAL_MODEL, message))
    backend = backends.get(model.spec.backend)
    if backend is None or backend.lora is None:
        name = backend.name if backend is not None else model.spec.backend
        message = (
            f"backend {name!r} of Model {key} cannot load LoRA adapters into a running engine"
            " (no runtime adapter API); use a backend that can, such as vllm"
        )
        return Base(key, model, None, Verdict(FAILED, BACKEND_UNSUPPORTED, message))
    try:
        why = backend.lora_disabled(model)
    except InvalidSpecError as exc:  # a config value of the wrong type
        why = str(exc)
    if why is not None:
        return Base(key, model, None, Verdict(FAILED, LORA_DISABLED, why))
    return Base(key, model, backend.lora)


@dataclass
class AdapterPlan:
    """One adapter in one reconcile."""

    adapter: LoRAAdapter
    verdict: Verdict | None = None
    """Decided without the engines (None: decided by what they hold after converging)."""
    path: str | None = None
    """Where the engines load it from, when it is wanted on them now."""
    cache: CacheState | None = None
    deleting: bool = False
    held: bool = False
    """A load the engine refused for this spec: left as it is until the spec changes."""

    @property
    def name(self) -> str:
        """The adapter name engines know it by."""
        return self.adapter.spec.adapter_name


Refusal = tuple[int, int, frozenset[str]]
"""An adapter's generation, its Model's, and the ready replicas: a refused load is tried
again when one of them changes (a new spec, a replaced or restarted replica)."""


def refusal(adapter: LoRAAdapter, base: Base, states: list[EngineState]) -> Refusal:
    """The circumstances of a refusal, to compare with the next pass's."""
    replicas = frozenset(s.replica.id for s in states)
    return (adapter.metadata.generation or 1, base.generation, replicas)


def owners(adapters: list[LoRAAdapter]) -> dict[str, str]:
    """Adapter name -> the key of the live adapter that has it (the first by key)."""
    out: dict[str, str] = {}
    for adapter in sorted(adapters, key=lambda a: a.key):
        if adapter.metadata.deletion_timestamp is None:
            out.setdefault(adapter.spec.adapter_name, adapter.key)
    return out


@dataclass
class Planner:
    """Plans each adapter of one base Model."""

    store: ModelStore
    cache: AdapterCache
    demand: DemandNotes
    refused: dict[str, Refusal]
    """Adapter key -> where an engine refused to load it (not tried again there)."""
    roots: AdapterRoots
    """Where LocalPath adapters may be loaded from."""

    async def plan(
        self, adapter: LoRAAdapter, base: Base, states: list[EngineState], taken: dict[str, str]
    ) -> AdapterPlan:
        """What to do with ``adapter`` given its base and what the engines hold."""
        total = len(states)
        if adapter.metadata.deletion_timestamp is not None:
            return AdapterPlan(adapter, deleting=True)
        if base.problem is not None:
            return AdapterPlan(adapter, _counted(base.problem, total))
        owner = taken.get(adapter.spec.adapter_name)
        if owner != adapter.key:
            message = f"adapter name {adapter.spec.adapter_name!r} is {owner}'s on Model {base.key}"
            return AdapterPlan(adapter, Verdict(FAILED, NAME_CONFLICT, message, total=total))
        if self.refused.get(adapter.key) == refusal(adapter, base, states):
            return AdapterPlan(adapter, held=True)
        adapter = await finalizer.hold(self.store, adapter)  # before the first fetch or load
        assert base.model is not None  # no problem: the Model exists
        cache = resolve(adapter, self.cache, self.roots, base.model)
        return self._placed(adapter, base, states, cache)

    def _placed(
        self, adapter: LoRAAdapter, base: Base, states: list[EngineState], cache: CacheState
    ) -> AdapterPlan:
        total, name = len(states), adapter.spec.adapter_name
        if cache.status is CacheStatus.FAILED:
            return AdapterPlan(
                adapter, Verdict(FAILED, cache.reason, cache.message, 0, total, cache)
            )
        if cache.status is CacheStatus.PENDING:
            held = sum(name in s.held for s in states)
            message = f"caching its weights: {cache.message}"
            return AdapterPlan(
                adapter,
                Verdict(LoRAAdapterPhase.CACHING, CACHING, message, held, total, cache),
                cache=cache,
            )
        if not states:
            message = f"Model {base.key} has no ready replica; the adapter is loaded when one is"
            return AdapterPlan(adapter, Verdict(PENDING, AWAITING_REPLICAS, message, 0, 0, cache))
        wanted = (
            adapter.spec.preload
            or self.demand.wanted(base.key, name)
            or any(name in s.held for s in states)
        )
        if not wanted:
            message = "not preloaded: loaded on the first request for it"
            return AdapterPlan(
                adapter, Verdict(PENDING, AWAITING_REQUEST, message, 0, total, cache)
            )
        assert cache.path is not None  # READY carries the path
        return AdapterPlan(adapter, path=str(cache.path), cache=cache)


def _counted(verdict: Verdict, total: int) -> Verdict:
    return Verdict(verdict.phase, verdict.reason, verdict.message, 0, total)
