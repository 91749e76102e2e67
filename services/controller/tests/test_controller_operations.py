"""Pin, unpin and unload by hand (api/operations.py, ModelService): annotations the
arbiter and the serverless rule read, so they hold across controller restarts."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from flexinfer_common.api import Model
from flexinfer_common.api.meta import ObjectMeta
from flexinfer_common.api.model import ModelSpec
from flexinfer_common.api.operations import (
    PINNED_ANNOTATION,
    UNLOADED_AT_ANNOTATION,
    is_pinned,
    unload_refusal,
    unload_stamp,
    unloaded_at,
)
from flexinfer_common.bus import topics
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import create_store
from flexinfer_controller.core.desired import busy_until
from flexinfer_controller.runtime.base import Replica, ReplicaState
from flexinfer_controller.testing import (
    Harness,
    demand,
    engine_pids,
    error_of,
    fake_model_dir,
    kill_engines,
    model_doc,
    run_controller,
)

TOKEN = "ctl-" + secrets.token_hex(20)
T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
"""In the past: a starting replica counts from now, which must come after the unload."""


@pytest.fixture(autouse=True)
def no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    assert kill_engines(tmp_path) == [], "a test left engines running"


def _replica(state: ReplicaState, started: datetime, ready: datetime | None = None) -> Replica:
    return Replica(
        id="r1",
        model="default/m",
        generation=1,
        state=state,
        started_at=started.timestamp(),
        ready_at=ready.timestamp() if ready is not None else None,
    )


def test_an_unload_hides_the_activity_and_the_replicas_before_it() -> None:
    cut = T0 + timedelta(seconds=10)
    ready = _replica(ReplicaState.READY, T0, T0 + timedelta(seconds=2))
    assert busy_until(T0 + timedelta(seconds=5), [ready]) == T0 + timedelta(seconds=5)
    assert busy_until(T0 + timedelta(seconds=5), [ready], cut) is None
    # A request after the unload counts again, and brings the model back.
    later = cut + timedelta(seconds=1)
    assert busy_until(later, [ready], cut) == later
    # A replica started before the unload (still starting) does not keep it busy ...
    assert busy_until(None, [_replica(ReplicaState.STARTING, T0)], cut) is None
    # ... one started for a request after it does.
    started = busy_until(None, [_replica(ReplicaState.STARTING, later)], cut)
    assert started is not None
    assert started > cut


def test_annotations_read_back() -> None:
    meta = ObjectMeta(name="m", annotations={PINNED_ANNOTATION: "True"})
    assert is_pinned(meta)
    assert not is_pinned(ObjectMeta(name="m", annotations={PINNED_ANNOTATION: "yes"}))
    stamp = unload_stamp(T0)
    assert stamp == T0.strftime("%Y-%m-%dT%H:%M:%S.000000Z")
    assert unloaded_at(ObjectMeta(name="m", annotations={UNLOADED_AT_ANNOTATION: stamp})) == T0
    # Written by hand with kubectl: a typo is ignored, a zone-less time is UTC.
    assert unloaded_at(ObjectMeta(name="m", annotations={UNLOADED_AT_ANNOTATION: "soon"})) is None
    zoneless = T0.strftime("%Y-%m-%dT%H:%M:%S")
    naive = ObjectMeta(name="m", annotations={UNLOADED_AT_ANNOTATION: zoneless})
    assert unloaded_at(naive) == T0


@pytest.mark.parametrize(
    ("serverless", "endpoints", "reason"),
    [
        ({}, None, None),
        ({"minReplicas": 1}, None, "minReplicas is 1"),
        ({"scaleToZero": False}, None, "scaleToZero is false"),
        ({"enabled": False}, None, "enabled is false"),
        ({}, ["http://127.0.0.1:1"], "spec.endpoints"),
    ],
)
def test_a_spec_that_keeps_replicas_refuses_an_unload(
    serverless: dict[str, object], endpoints: list[str] | None, reason: str | None
) -> None:
    doc: dict[str, object] = {"backend": "reference", "source": "file:///m"}
    doc["serverless"] = serverless
    if endpoints:
        doc["endpoints"] = endpoints
    refusal = unload_refusal(ModelSpec.model_validate(doc))
    assert (refusal is None) if reason is None else (reason in str(refusal)), refusal


async def _resident(h: Harness, name: str) -> Model:
    await h.publish(topics.DEMAND, demand(f"default/{name}"))
    model = await h.wait_phase(name, "Ready", timeout_s=20)
    assert model.status.residency == "Resident"
    return model


async def test_unload_stops_the_engines_and_the_next_request_brings_them_back(
    tmp_path: Path,
) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    async with run_controller(tmp_path) as h:
        await h.put_model(model_doc("tiny", source, idle_timeout="300s"))
        await _resident(h, "tiny")
        assert len(engine_pids(tmp_path)) == 1

        before = datetime.now(UTC)
        unloaded = await h.client.post("/v1/admin/models/tiny/unload")
        assert unloaded.status_code == 200, unloaded.text
        body = unloaded.json()
        stamp = datetime.fromisoformat(
            body["metadata"]["annotations"][UNLOADED_AT_ANNOTATION].replace("Z", "+00:00")
        )
        assert stamp >= before
        # Answered once the reconcile that stops the engine ran: it says so at once.
        assert body["status"]["residency"] == "Stopped"
        assert (body["status"]["replicas"], body["status"]["desiredReplicas"]) == (0, 0)
        assert body["status"]["phase"] == "Idle"
        assert engine_pids(tmp_path) == []

        await _resident(h, "tiny")  # a request after the unload counts again
        # Unloading twice is an unload now, again.
        again = await h.client.post("/v1/admin/models/tiny/unload")
        assert again.json()["status"]["residency"] == "Stopped", again.text


async def test_an_unload_holds_across_a_controller_restart(tmp_path: Path) -> None:
    """Level-triggered: the new controller reads the annotation, not a forgotten event."""
    source = fake_model_dir(tmp_path / "m").as_uri()
    store = create_store(StoreSettings(url=f"sqlite:///{tmp_path / 'shared.db'}"))
    try:
        async with run_controller(tmp_path, store=store) as h:
            await h.put_model(model_doc("tiny", source, idle_timeout="300s"))
            await _resident(h, "tiny")
            assert (await h.client.post("/v1/admin/models/tiny/unload")).status_code == 200
        # lastActiveTime in status is recent (within the idle timeout), yet it stays at 0.
        stored = await store.get_model("default", "tiny")
        assert stored.status.last_active_time is not None
        async with run_controller(tmp_path, store=store) as h:
            await h.app.state.controller.sync("default/tiny", 10.0)
            model = await h.wait_phase("tiny", "Idle")
            assert model.status.residency == "Stopped"
            assert engine_pids(tmp_path) == []
    finally:
        await store.close()


async def test_a_model_that_keeps_replicas_refuses_an_unload(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    async with run_controller(tmp_path) as h:
        await h.put_model(model_doc("kept", source, minReplicas=1))
        await h.wait_phase("kept", "Ready", timeout_s=20)
        refused = await h.client.post("/v1/admin/models/kept/unload")
        assert refused.status_code == 409, refused.text
        error = error_of(refused.text)
        assert "minReplicas is 1" in str(error["message"])
        assert "--replicas 0" in str(error["message"])
        model = await h.store.get_model("default", "kept")
        assert UNLOADED_AT_ANNOTATION not in model.metadata.annotations
        assert len(engine_pids(tmp_path)) == 1


async def test_pin_and_unpin_set_and_remove_the_annotation(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    async with run_controller(tmp_path) as h:
        doc = model_doc("tiny", source)
        doc["metadata"]["annotations"] = {"team": "ml"}
        await h.put_model(doc)
        pinned = await h.client.post("/v1/admin/models/tiny/pin")
        assert pinned.status_code == 200, pinned.text
        annotations = {"team": "ml", PINNED_ANNOTATION: "true"}
        assert pinned.json()["metadata"]["annotations"] == annotations
        assert (await h.client.post("/v1/admin/models/tiny/pin")).status_code == 200
        model = await h.store.get_model("default", "tiny")
        assert is_pinned(model.metadata)
        assert model.metadata.generation == 1  # an annotation is no spec change

        unpinned = await h.client.post("/v1/admin/models/tiny/unpin")
        assert unpinned.json()["metadata"]["annotations"] == {"team": "ml"}
        assert not is_pinned((await h.store.get_model("default", "tiny")).metadata)


async def test_bad_input_is_a_json_4xx(tmp_path: Path) -> None:
    async with run_controller(tmp_path) as h:
        for action in ("pin", "unpin", "unload"):
            missing = await h.client.post(f"/v1/admin/models/ghost/{action}")
            assert missing.status_code == 404, missing.text
            assert "ghost" in str(error_of(missing.text)["message"])
            bad = await h.client.post(f"/v1/admin/models/Not_A_Name/{action}")
            assert bad.status_code in (400, 422), bad.text
            error_of(bad.text)
            ns = await h.client.post(f"/v1/admin/models/x/{action}", params={"namespace": "B!"})
            assert ns.status_code in (400, 422), ns.text


async def test_the_actions_need_the_admin_token(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    async with run_controller(tmp_path, auth_token=TOKEN) as h:
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        doc = model_doc("tiny", source)
        assert (await h.client.put("/v1/admin/models/tiny", json=doc, headers=bearer)).is_success
        for action in ("pin", "unpin", "unload"):
            refused = await h.client.post(f"/v1/admin/models/tiny/{action}")
            assert refused.status_code == 401, refused.text
        assert not is_pinned((await h.store.get_model("default", "tiny")).metadata)
        done = await h.client.post("/v1/admin/models/tiny/pin", headers=bearer)
        assert done.status_code == 200, done.text
