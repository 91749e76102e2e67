"""Reconcile the LoRAAdapters of one base Model onto its ready engines.

Level-triggered and idempotent, keyed by the base Model: every pass reads the Model's
adapters and the runtime's ready replicas, asks each engine what it holds, loads what is
wanted and missing, unloads what is not declared (or is being deleted), then writes each
adapter's status. Nothing is taken from the event that triggered it, so a pass run twice,
late or for no reason changes nothing; a replica that restarted empty is refilled by the
next pass (a ready event triggers one, and the loop's resync runs one regularly).

Errors: an engine's 4xx fails the adapter with the engine's message and is not retried
for that spec (of the adapter and of its Model); a connection error or a 5xx leaves it
Pending and raises EngineUnavailableError once every status is written, so the worker
retries with backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace

from flexinfer_common.api import LoRAAdapter, LoRAAdapterPhase, Model
from flexinfer_common.api.lora import LORA_FINALIZER
from flexinfer_common.errors import ConflictError, NotFoundError, PermanentError, TemporaryError
from flexinfer_common.store import ModelStore
from flexinfer_controller.backends import BackendRegistry
from flexinfer_controller.core.lora import finalizer
from flexinfer_controller.core.lora.demand import DemandNotes
from flexinfer_controller.core.lora.engine import AdapterEngine, EngineUnavailableError
from flexinfer_controller.core.lora.engines import EngineState, Wanted, converge, survey
from flexinfer_controller.core.lora.plan import (
    AdapterPlan,
    Base,
    Planner,
    Refusal,
    base_of,
    owners,
    refusal,
)
from flexinfer_controller.core.lora.roots import AdapterRoots
from flexinfer_controller.core.lora.sources import AdapterCache
from flexinfer_controller.core.lora.status import (
    ENGINE_UNAVAILABLE,
    LOAD_FAILED,
    UNLOADING,
    Verdict,
    build_status,
    loaded,
)
from flexinfer_controller.runtime import ReplicaState, Runtime

log = logging.getLogger(__name__)

Publish = Callable[[LoRAAdapter, bool], Awaitable[None]]
"""Tells the proxies an adapter changed (``True``: it is gone)."""
Announce = Callable[[str, Mapping[str, frozenset[str] | None]], Awaitable[object]]
"""Tells the proxies which adapters each ready replica of a Model holds (replica id ->
names; None: it could not be asked), so that they route an adapter's requests there."""

_MAX_CONFLICT_RETRIES = 5


class AdapterReconciler:
    """Reconciles the adapters of one Model key at a time (the WorkQueue sees to that)."""

    def __init__(
        self,
        *,
        store: ModelStore,
        runtime: Runtime,
        backends: BackendRegistry,
        engine: AdapterEngine,
        cache: AdapterCache,
        demand: DemandNotes,
        publish: Publish,
        announce: Announce,
        roots: AdapterRoots,
    ) -> None:
        self._store = store
        self._runtime = runtime
        self._backends = backends
        self._engine = engine
        self._cache = cache
        self._demand = demand
        self._publish = publish
        self._announce = announce
        self._refused: dict[str, Refusal] = {}
        self._planner = Planner(store, cache, demand, self._refused, roots)

    async def reconcile(self, key: str) -> bool:
        """Converge the adapters of Model ``key``; False when it has none."""
        for _ in range(_MAX_CONFLICT_RETRIES):
            try:
                return await self._reconcile(key)
            except ConflictError:
                log.debug("an adapter of %s changed while reconciling; retrying", key)
        raise TemporaryError(f"{key}: its adapters kept changing during reconcile", delay=0.5)

    async def _reconcile(self, key: str) -> bool:
        namespace, _, name = key.partition("/")
        adapters = [
            a for a in await self._store.list_adapters(namespace) if a.spec.model_ref == name
        ]
        base = base_of(key, await self._model(namespace, name), self._backends)
        states = await self._survey(base)
        if not adapters:
            # Its last adapter went (or moved to another Model): what the engines still
            # hold is declared by no one. Once: the key is not looked at again after this.
            self._demand.forget(key)
            if base.api is not None and states:
                await converge(self._engine, base.api, states, Wanted({}))
            await self._announce(key, _holdings(states))
            return False
        taken = owners(adapters)
        plans = [await self._planner.plan(a, base, states, taken) for a in adapters]
        wanted = _wanted(plans)
        if base.api is not None and states:
            await converge(self._engine, base.api, states, wanted)
        # Before the statuses: a proxy told "Loaded" already knows where it is loaded.
        await self._announce(key, _holdings(states))
        retry = [await self._finish(p, base, states, wanted) for p in plans]
        unreachable = [f"{s.replica.id}: {s.unreachable}" for s in states if s.unreachable]
        if any(retry) or unreachable:
            why = "; ".join(unreachable) or "an engine failed to load or unload an adapter"
            raise EngineUnavailableError(f"adapters of {key}: {why}")
        return True

    async def _survey(self, base: Base) -> list[EngineState]:
        """What each ready replica holds (none asked when its engines cannot load adapters)."""
        if base.api is None:
            return []
        replicas = self._runtime.list(base.key)
        ready = [r for r in replicas if r.state is ReplicaState.READY and r.url]
        return await survey(self._engine, base.api, ready)

    async def _model(self, namespace: str, name: str) -> Model | None:
        try:
            return await self._store.get_model(namespace, name)
        except NotFoundError:
            return None

    async def _finish(
        self, plan: AdapterPlan, base: Base, states: list[EngineState], wanted: Wanted
    ) -> bool:
        """Write the adapter's status (or let it go); True when it needs another pass."""
        if plan.held:
            return False
        if plan.deleting:
            return await self._unloaded(plan, base, states, wanted)
        verdict = plan.verdict or self._outcome(plan, base, states)
        await self._write(plan.adapter, verdict)
        return verdict.reason == ENGINE_UNAVAILABLE

    def _outcome(self, plan: AdapterPlan, base: Base, states: list[EngineState]) -> Verdict:
        """Loaded on every ready replica, failed (an engine refused), or not yet."""
        name, total = plan.name, len(states)
        holding = sum(name in s.held for s in states)
        if holding:
            self._demand.fulfilled(base.key, name)
        if holding == total:
            return replace(loaded(total), cache=plan.cache)
        refused = [
            (s, s.errors[name]) for s in states if isinstance(s.errors.get(name), PermanentError)
        ]
        if refused:
            self._refused[plan.adapter.key] = refusal(plan.adapter, base, states)
            replica, error = refused[0]
            message = f"replica {replica.replica.id} refused it: {error}"
            return Verdict(
                LoRAAdapterPhase.FAILED, LOAD_FAILED, message, holding, total, plan.cache
            )
        why = [
            f"{s.replica.id}: {s.errors.get(name) or s.unreachable}"
            for s in states
            if name not in s.held
        ]
        message = f"loaded on {holding} of {total} ready replicas; " + "; ".join(why)
        return Verdict(
            LoRAAdapterPhase.PENDING, ENGINE_UNAVAILABLE, message, holding, total, plan.cache
        )

    async def _unloaded(
        self, plan: AdapterPlan, base: Base, states: list[EngineState], wanted: Wanted
    ) -> bool:
        """A deleted adapter: its finalizer goes once no engine holds it any more."""
        adapter, name = plan.adapter, plan.name
        if LORA_FINALIZER not in adapter.metadata.finalizers:
            return False  # never fetched nor loaded; other finalizers are not ours to wait on
        shared = name in wanted.paths or name in wanted.keep  # another adapter has the name now
        still = [] if shared else [s for s in states if name in s.held]
        unknown = [s for s in states if s.unreachable is not None]
        if still or (unknown and not shared):
            message = f"unloading: still held by {len(still)} of {len(states)} ready replicas"
            await self._write(
                adapter,
                Verdict(LoRAAdapterPhase.UNLOADING, UNLOADING, message, len(still), len(states)),
            )
            return True
        await self._cache.release(adapter, base.model)
        self._refused.pop(adapter.key, None)
        await finalizer.release(self._store, adapter)
        await self._publish(adapter, True)
        log.info("loraadapter %s unloaded everywhere and released", adapter.key)
        return False

    async def _write(self, adapter: LoRAAdapter, verdict: Verdict) -> None:
        status = build_status(adapter, verdict)
        if status.model_dump() == adapter.status.model_dump():
            return
        meta = adapter.metadata
        stored = await self._store.update_adapter_status(
            meta.namespace, meta.name, status, meta.resource_version
        )
        if adapter.status.phase is not status.phase:
            log.info(
                "loraadapter %s: %s (%s): %s",
                adapter.key,
                status.phase.value,
                verdict.reason,
                verdict.message,
            )
            await self._publish(stored, False)


def _holdings(states: list[EngineState]) -> dict[str, frozenset[str] | None]:
    """Replica id -> the adapters its engine holds now (None: it could not be asked)."""
    return {s.replica.id: None if s.unreachable is not None else frozenset(s.held) for s in states}


def _wanted(plans: list[AdapterPlan]) -> Wanted:
    """What every engine should hold: adapters wanted now; kept as they are: adapters whose
    load was refused (not retried) and adapters caching a new source (served until then)."""
    paths = {p.name: p.path for p in plans if p.path is not None}
    caching = {
        p.name
        for p in plans
        if p.verdict is not None and p.verdict.phase is LoRAAdapterPhase.CACHING
    }
    keep = {p.name for p in plans if p.held} | caching
    return Wanted(paths, frozenset(keep - set(paths)))
