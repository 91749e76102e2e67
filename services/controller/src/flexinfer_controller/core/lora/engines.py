"""One base Model's ready engines: what each holds, and bringing each to the wanted set.

Every reconcile asks each engine what it holds (``AdapterEngine.listed``) before acting,
so an engine that restarted and lost its adapters, or a new replica, is found by looking,
not by remembering. An engine that cannot be asked is ``unreachable``: nothing is
concluded about it, and the reconcile is retried with backoff.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from flexinfer_common.errors import FlexInferError, PermanentError
from flexinfer_controller.backends import AdapterEndpoints
from flexinfer_controller.core.lora.engine import AdapterEngine, EngineRefusedError
from flexinfer_controller.runtime import Replica


@dataclass
class EngineState:
    """One ready replica: what it holds, and what failed on it in this reconcile."""

    replica: Replica
    held: dict[str, str | None] = field(default_factory=dict)
    """Adapter name -> path it was loaded from (None: the engine does not say)."""
    unreachable: str | None = None
    """Why it could not be asked what it holds (None: it answered)."""
    errors: dict[str, FlexInferError] = field(default_factory=dict)
    """Adapter name -> why loading or unloading it failed here."""


@dataclass(frozen=True, slots=True)
class Wanted:
    """What every engine should hold: name -> path; ``keep``: names left as they are."""

    paths: dict[str, str]
    keep: frozenset[str] = frozenset()


async def survey(
    engine: AdapterEngine, api: AdapterEndpoints, ready: list[Replica]
) -> list[EngineState]:
    """Ask every ready replica what it holds, all at once."""

    async def one(replica: Replica) -> EngineState:
        assert replica.url is not None  # ready replicas have a URL
        try:
            return EngineState(replica, await engine.listed(replica.url, api))
        except FlexInferError as exc:
            return EngineState(replica, unreachable=str(exc))

    return list(await asyncio.gather(*(one(r) for r in ready)))


async def converge(
    engine: AdapterEngine, api: AdapterEndpoints, states: list[EngineState], wanted: Wanted
) -> None:
    """Bring every reachable engine to ``wanted``: unloads first (they free slots), then
    loads; engines in parallel, one request at a time on each."""
    await asyncio.gather(*(_one(engine, api, s, wanted) for s in states if s.unreachable is None))


async def _one(
    engine: AdapterEngine, api: AdapterEndpoints, state: EngineState, wanted: Wanted
) -> None:
    url = state.replica.url
    assert url is not None
    for name, root in list(state.held.items()):
        want = wanted.paths.get(name)
        if name in wanted.keep or (want is not None and root in (None, want)):
            continue
        try:  # not wanted, or loaded from another path: reloaded below
            await engine.unload(url, api, name)
            del state.held[name]
        except FlexInferError as exc:
            state.errors[name] = exc
    for name, path in wanted.paths.items():
        if name in state.held or name in state.errors:
            continue
        try:
            await engine.load(url, api, name, path)
            state.held[name] = path
        except EngineRefusedError as exc:
            await _recheck(engine, api, state, name, exc)
        except FlexInferError as exc:
            state.errors[name] = exc


async def _recheck(
    engine: AdapterEngine, api: AdapterEndpoints, state: EngineState, name: str, exc: PermanentError
) -> None:
    """A refused load: if the engine holds it now (loaded by a concurrent request, which
    vLLM refuses as "already loaded"), that is success; otherwise the refusal stands."""
    assert state.replica.url is not None
    try:
        held = await engine.listed(state.replica.url, api)
    except FlexInferError:
        held = {}
    if name in held:
        state.held[name] = held[name]
    else:
        state.errors[name] = exc
