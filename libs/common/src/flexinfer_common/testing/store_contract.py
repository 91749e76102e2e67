"""The ModelStore contract: checks every implementation passes (SQL, Kubernetes).

Each check is ``async def check(new_store, traits)``: ``new_store()`` opens another store
on the same backing data (a second replica), ``traits`` says where the backends are
allowed to differ. The caller closes the stores it made. No pytest in here: test modules
parametrize over ``MODEL_STORE_CHECKS`` and ``ADAPTER_STORE_CHECKS``.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from flexinfer_common.api import Condition, LoRAAdapter, Model, ModelPhase, ModelStatus
from flexinfer_common.api.meta import set_condition
from flexinfer_common.errors import ConflictError, NotFoundError
from flexinfer_common.store.base import EndpointRecord, ModelStore


@dataclass(frozen=True)
class Traits:
    """Where a backend may differ from the others."""

    noop_write_bumps_version: bool = True
    """SQL bumps resourceVersion on every write; the apiserver keeps it when nothing changed."""


StoreFactory = Callable[[], ModelStore]
Check = Callable[[StoreFactory, Traits], Awaitable[None]]


@contextmanager
def raises(kind: type[BaseException], match: str | None = None) -> Iterator[None]:
    """Assert that the block raises ``kind`` (with ``match`` found in its message)."""
    try:
        yield
    except kind as exc:
        if match is not None and not re.search(match, str(exc)):
            raise AssertionError(f"{exc!r} does not match {match!r}") from exc
        return
    raise AssertionError(f"{kind.__name__} not raised")


def make_model(name: str = "llama", namespace: str = "default", **spec: Any) -> Model:
    """A Model with durations, labels and a free-form config."""
    body = {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"team": "ml"},
            "annotations": {"note": "ünïcode ok"},
        },
        "spec": {
            "backend": "vllm",
            "source": "hf://org/model",
            "serverless": {"idleTimeout": "1h30m", "coldStartTimeout": "250ms"},
            "gpu": {"vendor": "nvidia", "count": 1, "swapCooldown": "45s"},
            "config": {"maxModelLen": 4096, "nested": {"list": [1, 2.5, "x"]}},
            **spec,
        },
    }
    return Model.model_validate(body)


def make_adapter(name: str = "sql", namespace: str = "default", **spec: object) -> LoRAAdapter:
    """A LoRAAdapter on the ``llama`` Model."""
    body: dict[str, object] = {
        "modelRef": "llama",
        "adapterName": f"{name}-lora",
        "source": {"type": "HuggingFace", "uri": f"org/{name}"},
    }
    body.update(spec)
    return LoRAAdapter.model_validate(
        {"metadata": {"name": name, "namespace": namespace, "labels": {"a": "b"}}, "spec": body}
    )


def _rv(obj: Model | LoRAAdapter) -> int:
    return int(obj.metadata.resource_version or 0)


async def create_and_get_round_trip(new_store: StoreFactory, traits: Traits) -> None:
    """A created Model reads back whole, with server-set metadata."""
    store = new_store()
    model = make_model()
    created = await store.create_model(model)
    meta = created.metadata
    assert uuid.UUID(meta.uid or "").version == 4
    assert meta.generation == 1
    assert _rv(created) > 0
    assert meta.creation_timestamp is not None
    assert meta.creation_timestamp.utcoffset() == timedelta(0)
    assert abs(meta.creation_timestamp - datetime.now(UTC)) < timedelta(minutes=1)
    got = await store.get_model("default", "llama")
    assert got == created
    assert got.spec == model.spec
    assert got.spec.serverless is not None
    assert got.spec.serverless.idle_timeout == timedelta(hours=1, minutes=30)
    assert got.spec.serverless.cold_start_timeout == timedelta(milliseconds=250)
    assert got.metadata.labels == {"team": "ml"}
    assert got.metadata.annotations == {"note": "ünïcode ok"}
    assert got.status == model.status


async def status_round_trip_keeps_datetimes(new_store: StoreFactory, traits: Traits) -> None:
    """Status timestamps keep their instant, microseconds included."""
    store = new_store()
    created = await store.create_model(make_model())
    when = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=2)))
    status = ModelStatus(
        phase=ModelPhase.READY,
        conditions=set_condition(
            [], Condition(type="Ready", status="True", reason="Up", last_transition_time=when)
        ),
        ready_replicas=1,
        last_active_time=when,
        observed_generation=1,
    )
    rv = created.metadata.resource_version
    updated = await store.update_status("default", "llama", status, rv)
    got = await store.get_model("default", "llama")
    assert got == updated
    assert got.status == status
    assert got.status.last_active_time == when
    assert got.status.conditions[0].last_transition_time == when


async def create_twice_is_a_conflict(new_store: StoreFactory, traits: Traits) -> None:
    """The key is namespace/name."""
    store = new_store()
    await store.create_model(make_model())
    with raises(ConflictError, match="already exists"):
        await store.create_model(make_model())
    await store.create_model(make_model(namespace="other"))


async def missing_models(new_store: StoreFactory, traits: Traits) -> None:
    """Every call on an absent Model is NotFoundError."""
    store = new_store()
    with raises(NotFoundError):
        await store.get_model("default", "nope")
    with raises(NotFoundError):
        await store.delete_model("default", "nope")
    with raises(NotFoundError):
        await store.replace_model(make_model("nope"))
    with raises(NotFoundError):
        await store.update_status("default", "nope", ModelStatus())
    assert await store.list_models() == []


async def list_is_ordered_by_key(new_store: StoreFactory, traits: Traits) -> None:
    """Lists are ordered by namespace/name and filter by namespace."""
    store = new_store()
    for namespace, name in [("default", "z"), ("a", "y"), ("a-b", "x"), ("a", "b")]:
        await store.create_model(make_model(name, namespace))
    keys = [m.key for m in await store.list_models()]
    assert keys == sorted(keys) == ["a-b/x", "a/b", "a/y", "default/z"]
    assert [m.key for m in await store.list_models("a")] == ["a/b", "a/y"]
    assert await store.list_models("empty") == []


async def generation_bumps_only_on_spec_change(new_store: StoreFactory, traits: Traits) -> None:
    """Labels change the resourceVersion only; the spec bumps the generation too."""
    store = new_store()
    created = await store.create_model(make_model())
    relabelled = created.model_copy(deep=True)
    relabelled.metadata.labels = {"team": "infra"}
    same_spec = await store.replace_model(relabelled)
    assert same_spec.metadata.generation == 1
    assert same_spec.metadata.labels == {"team": "infra"}
    assert _rv(same_spec) > _rv(created)
    assert same_spec.metadata.uid == created.metadata.uid
    assert same_spec.metadata.creation_timestamp == created.metadata.creation_timestamp
    changed = same_spec.model_copy(deep=True)
    changed.spec.source = "hf://org/other"
    bumped = await store.replace_model(changed)
    assert bumped.metadata.generation == 2
    assert bumped.spec.source == "hf://org/other"
    assert (await store.get_model("default", "llama")) == bumped


async def replace_keeps_status(new_store: StoreFactory, traits: Traits) -> None:
    """replace ignores the status; a status write keeps spec and generation."""
    store = new_store()
    created = await store.create_model(make_model())
    ready = ModelStatus(phase=ModelPhase.READY, ready_replicas=2)
    with_status = await store.update_status("default", "llama", ready)
    assert with_status.metadata.generation == 1
    changed = with_status.model_copy(deep=True)
    changed.spec.backend = "llamacpp"
    changed.status = ModelStatus(phase=ModelPhase.FAILED)  # ignored by replace
    replaced = await store.replace_model(changed)
    assert replaced.status == ready
    assert replaced.spec.backend == "llamacpp"
    assert created.metadata.uid == replaced.metadata.uid


async def writes_bump_the_resource_version(new_store: StoreFactory, traits: Traits) -> None:
    """Every change takes a newer resourceVersion; reads never do."""
    store = new_store()
    versions = [_rv(await store.create_model(make_model()))]
    for phase in (ModelPhase.LOADING, ModelPhase.READY):
        versions.append(
            _rv(await store.update_status("default", "llama", ModelStatus(phase=phase)))
        )
    assert versions == sorted(set(versions))
    again = await store.update_status("default", "llama", ModelStatus(phase=ModelPhase.READY))
    model = await store.replace_model(again)
    if traits.noop_write_bumps_version:
        assert versions[-1] < _rv(again) < _rv(model)
    else:
        assert versions[-1] == _rv(again) == _rv(model)
    assert _rv(await store.get_model("default", "llama")) == _rv(model)


async def stale_resource_versions_conflict(new_store: StoreFactory, traits: Traits) -> None:
    """A write at a stale (or never issued) resourceVersion writes nothing."""
    store = new_store()
    created = await store.create_model(make_model())
    fresh = await store.update_status("default", "llama", ModelStatus(phase=ModelPhase.LOADING))
    stale = created.model_copy(deep=True)
    stale.spec.backend = "stale"
    with raises(ConflictError, match="stale"):
        await store.replace_model(stale)
    with raises(ConflictError):
        await store.update_status(
            "default", "llama", ModelStatus(), created.metadata.resource_version
        )
    with raises(ConflictError):
        await store.update_status("default", "llama", ModelStatus(), "not-a-number")
    assert await store.get_model("default", "llama") == fresh  # the losers wrote nothing
    stale.metadata.resource_version = None  # unconditional write
    assert (await store.replace_model(stale)).spec.backend == "stale"


async def concurrent_writers_exactly_one_wins(new_store: StoreFactory, traits: Traits) -> None:
    """Of writes at one resourceVersion, on two stores, exactly one lands."""
    one, two = new_store(), new_store()
    created = await one.create_model(make_model())
    for round_ in range(5):
        current = await two.get_model("default", "llama")
        rv = current.metadata.resource_version
        writes = []
        for i, store in enumerate([one, two] * 4):
            edited = current.model_copy(deep=True)
            edited.spec.backend = f"b{round_}-{i}"
            writes.append(store.replace_model(edited))
            status = ModelStatus(message=f"s{round_}-{i}")
            writes.append(store.update_status("default", "llama", status, rv))
        results = await asyncio.gather(*writes, return_exceptions=True)
        winners = [r for r in results if isinstance(r, Model)]
        losers = [r for r in results if isinstance(r, BaseException)]
        assert len(winners) == 1, results
        assert all(isinstance(e, ConflictError) for e in losers), losers
        assert await one.get_model("default", "llama") == winners[0]
    final = await two.get_model("default", "llama")
    assert final.metadata.uid == created.metadata.uid


async def concurrent_unconditional_writes_land(new_store: StoreFactory, traits: Traits) -> None:
    """Unconditional writes from two stores all land, each at its own resourceVersion."""
    one, two = new_store(), new_store()
    await one.create_model(make_model())
    writes = [
        (one if i % 2 else two).update_status("default", "llama", ModelStatus(replicas=i))
        for i in range(20)
    ]
    results = await asyncio.gather(*writes)
    assert len({r.metadata.resource_version for r in results}) == 20


async def delete_and_recreate(new_store: StoreFactory, traits: Traits) -> None:
    """Delete takes the endpoints along; a new object never reuses a version."""
    store = new_store()
    first = await store.create_model(make_model())
    now = datetime.now(UTC)
    await store.put_endpoint(EndpointRecord("default/llama", "r1", "http://a", True, None, now))
    await store.put_endpoint(EndpointRecord("default/other", "r1", "http://b", True, None, now))
    await store.delete_model("default", "llama")
    with raises(NotFoundError):
        await store.get_model("default", "llama")
    assert [e.model for e in await store.list_endpoints()] == ["default/other"]
    second = await store.create_model(make_model())
    assert second.metadata.uid != first.metadata.uid
    assert second.metadata.generation == 1
    assert _rv(second) > _rv(first)
    with raises(ConflictError):
        await store.replace_model(first)


async def endpoint_crud(new_store: StoreFactory, traits: Traits) -> None:
    """Endpoints: upsert by (model, replica), ordered lists, idempotent deletes."""
    store = new_store()
    at = datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=timezone(timedelta(hours=-5)))
    records = [
        EndpointRecord("default/b", "r2", "http://127.0.0.1:2", False, "node-1", at),
        EndpointRecord("default/a", "r9", "http://127.0.0.1:9", True, None, at),
        EndpointRecord("default/b", "r1", "http://127.0.0.1:1", True, "node-1", at),
    ]
    for record in records:
        await store.put_endpoint(record)
    listed = await store.list_endpoints()
    assert [(e.model, e.replica) for e in listed] == [
        ("default/a", "r9"),
        ("default/b", "r1"),
        ("default/b", "r2"),
    ]
    assert listed[0] == records[1]
    assert listed[0].updated_at == at
    assert listed[0].updated_at.tzinfo is not None
    later = at + timedelta(seconds=30)
    await store.put_endpoint(
        EndpointRecord("default/b", "r2", "http://127.0.0.1:3", True, None, later)
    )
    b = await store.list_endpoints("default/b")
    assert [(e.replica, e.url, e.ready, e.node) for e in b] == [
        ("r1", "http://127.0.0.1:1", True, "node-1"),
        ("r2", "http://127.0.0.1:3", True, None),
    ]
    assert b[1].updated_at == later
    await store.delete_endpoint("default/b", "r1")
    await store.delete_endpoint("default/b", "absent")  # no error
    assert [e.replica for e in await store.list_endpoints("default/b")] == ["r2"]
    assert await store.list_endpoints("default/none") == []


MODEL_STORE_CHECKS: list[Check] = [
    create_and_get_round_trip,
    status_round_trip_keeps_datetimes,
    create_twice_is_a_conflict,
    missing_models,
    list_is_ordered_by_key,
    generation_bumps_only_on_spec_change,
    replace_keeps_status,
    writes_bump_the_resource_version,
    stale_resource_versions_conflict,
    concurrent_writers_exactly_one_wins,
    concurrent_unconditional_writes_land,
    delete_and_recreate,
    endpoint_crud,
]
