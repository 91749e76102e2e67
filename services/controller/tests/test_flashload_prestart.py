"""The flash loader as local mode's pre-start step, through the real controller."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil
import pytest

from flexinfer_common.api import Model
from flexinfer_controller.flashload import FlashLoadSettings
from flexinfer_controller.flashload.prestart import FlashLoadPreStart, model_settings
from flexinfer_controller.flashload.testing import tree_digest
from flexinfer_controller.runtime.local import runtime_id
from flexinfer_controller.testing import (
    eventually,
    fake_model_dir,
    kill_engines,
    marked_pids,
    model_doc,
    run_controller,
)


def _flash_doc(source: Path, flash: dict[str, Any] | None) -> dict[str, Any]:
    doc = model_doc("tiny", source.as_uri(), minReplicas=1)
    if flash is not None:
        doc["spec"]["cache"] = {"flashLoader": flash}
    return doc


def _engine_cmdlines(tmp_path: Path) -> list[list[str]]:
    out = []
    for pid in marked_pids(runtime_id(tmp_path / "data")):
        try:
            out.append(psutil.Process(pid).cmdline())
        except psutil.Error:
            continue
    return out


@pytest.fixture
def shm(tmp_path: Path) -> Path:
    (tmp_path / "shm").mkdir()
    return tmp_path / "shm"


async def test_an_enabled_model_runs_from_its_tmpfs_copy_which_goes_with_it(
    tmp_path: Path, shm: Path
) -> None:
    source = fake_model_dir(tmp_path / "models" / "tiny")
    (source / "weights.bin").write_bytes(bytes(range(256)) * 4096)
    flash = FlashLoadSettings(dest=shm, margin_mb=0)  # off by default: the Model turns it on
    try:
        async with run_controller(tmp_path, flash_loader=flash) as h:
            doc = _flash_doc(source, {"enabled": True, "concurrency": 2})
            assert (await h.client.put("/v1/admin/models/tiny", json=doc)).status_code == 201
            await h.wait_phase("tiny", "Ready")
            copy = shm / "default_tiny"
            assert tree_digest(copy) == tree_digest(source)
            [argv] = _engine_cmdlines(tmp_path)
            assert str(copy) in argv
            assert str(source) not in argv
            assert (await h.client.delete("/v1/admin/models/tiny")).status_code == 204
            await eventually(lambda: not copy.exists())
            assert not any(shm.iterdir())  # noqa: ASYNC240 (a tmp directory)
    finally:
        assert kill_engines(tmp_path) == []


async def test_a_model_that_turns_it_off_runs_from_its_source(tmp_path: Path, shm: Path) -> None:
    source = fake_model_dir(tmp_path / "models" / "tiny")
    flash = FlashLoadSettings(enabled=True, dest=shm, margin_mb=0)
    try:
        async with run_controller(tmp_path, flash_loader=flash) as h:
            doc = _flash_doc(source, {"enabled": False})
            assert (await h.client.put("/v1/admin/models/tiny", json=doc)).status_code == 201
            await h.wait_phase("tiny", "Ready")
            [argv] = _engine_cmdlines(tmp_path)
            assert str(source) in argv
            assert not any(shm.iterdir())  # noqa: ASYNC240 (a tmp directory)
    finally:
        assert kill_engines(tmp_path) == []


async def test_a_copy_that_does_not_fit_fails_the_start_with_the_reason(
    tmp_path: Path, shm: Path
) -> None:
    source = fake_model_dir(tmp_path / "models" / "tiny")
    # A margin no disk has: the copy is refused, and without the fallback that is the
    # start's failure, reported on the Model rather than retried hot.
    flash = FlashLoadSettings(enabled=True, dest=shm, margin_mb=2**40, fallback_to_source=False)
    try:
        async with run_controller(tmp_path, flash_loader=flash) as h:
            doc = _flash_doc(source, None)
            assert (await h.client.put("/v1/admin/models/tiny", json=doc)).status_code == 201

            async def refused() -> bool:
                model = await h.store.get_model("default", "tiny")
                return "free" in (model.status.message or "")

            await eventually(refused)
            assert _engine_cmdlines(tmp_path) == []
    finally:
        assert kill_engines(tmp_path) == []


def test_the_model_spec_overrides_the_controller_settings(tmp_path: Path) -> None:
    base = FlashLoadSettings(dest=tmp_path, concurrency=8, verify_integrity=False)
    model = Model.model_validate(
        _flash_doc(tmp_path, {"enabled": True, "concurrency": 3, "verifyIntegrity": True})
    )
    merged = model_settings(model, base)
    assert (merged.enabled, merged.concurrency, merged.verify_integrity) == (True, 3, True)
    assert merged.dest == tmp_path
    assert model_settings(Model.model_validate(_flash_doc(tmp_path, None)), base) is base


async def test_release_without_a_tmpfs_is_a_no_op(tmp_path: Path) -> None:
    await FlashLoadPreStart(FlashLoadSettings(dest=tmp_path / "absent")).release("default/x")
    assert not (tmp_path / "absent").exists()
