"""The cleanup finalizer: added before any engine starts, released once the engines stop."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flexinfer_common.errors import NotFoundError
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import create_store
from flexinfer_controller.core.finalizer import MODEL_FINALIZER
from flexinfer_controller.testing import (
    engine_pids,
    eventually,
    fake_model_dir,
    kill_engines,
    model_doc,
    run_controller,
)


@pytest.fixture(autouse=True)
def no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    assert kill_engines(tmp_path) == [], "a test left engines running"


async def test_the_finalizer_is_held_and_a_client_cannot_drop_it(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    async with run_controller(tmp_path) as h:
        await h.put_model(model_doc("tiny", source, scaleToZero=False))
        ready = await h.wait_phase("tiny", "Ready")
        assert ready.metadata.finalizers == [MODEL_FINALIZER]
        # The user's document names no finalizer: applying it again keeps the controller's.
        again = await h.put_model(model_doc("tiny", source, scaleToZero=False, minReplicas=1))
        assert again["metadata"]["finalizers"] == [MODEL_FINALIZER]


async def test_a_delete_while_the_controller_is_down_completes_on_restart(
    tmp_path: Path,
) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    settings = StoreSettings(url=f"sqlite:///{tmp_path / 'shared.db'}")
    store = create_store(settings)
    try:
        async with run_controller(tmp_path, store=store, stop_engines_on_shutdown=False) as h:
            await h.put_model(model_doc("tiny", source, scaleToZero=False))
            await h.wait_phase("tiny", "Ready")
        assert len(engine_pids(tmp_path)) == 1  # left running for the next controller
        # The controller is gone: the delete can only stamp the Model, which stays.
        await store.delete_model("default", "tiny")
        held = await store.get_model("default", "tiny")
        assert held.metadata.deletion_timestamp is not None

        async def gone() -> bool:
            try:
                await store.get_model("default", "tiny")
            except NotFoundError:
                return True
            return False

        async with run_controller(tmp_path, store=store):
            await eventually(gone, timeout_s=20)
            await eventually(lambda: engine_pids(tmp_path) == [], timeout_s=20)
        assert await store.list_endpoints() == []
    finally:
        await store.close()
