"""A ModelDeployment's modelCacheRef as the bridge binds it: the cache's path, or a hold."""

from __future__ import annotations

from typing import Any

from flexinfer_controller.core.sources import SOURCE_HOLD_ANNOTATION, SourceHold, source_hold
from flexinfer_controller.legacy.cache_ref import (
    MODEL_CACHE_FAILED,
    MODEL_CACHE_NOT_FOUND,
    MODEL_CACHE_NOT_READY,
    NO_CACHE,
    CacheBinding,
    apply_binding,
    binding,
)


def cache(phase: str, generation: int = 1, observed: int = 1, **status: Any) -> dict[str, Any]:
    """A stored ModelCache with ``phase`` and its Ready condition."""
    ready = {"type": "Ready", "status": str(phase == "Ready"), "reason": "R",
             "message": f"it is {phase}", "observedGeneration": observed}  # fmt: skip
    return {
        "metadata": {"name": "c", "namespace": "ml", "generation": generation},
        "status": {"phase": phase, "conditions": [ready], **status},
    }


def test_absent_pending_and_failed_caches_hold_the_model() -> None:
    absent = binding("ml", "c", None)
    assert absent.hold is not None
    assert absent.hold.reason == MODEL_CACHE_NOT_FOUND
    assert "ModelCache ml/c does not exist" in absent.hold.message
    running = binding("ml", "c", cache("Provisioning"))
    assert running.hold is not None
    assert running.hold.reason == MODEL_CACHE_NOT_READY
    assert "ModelCache ml/c is Provisioning: it is Provisioning" in running.hold.message
    failed = binding("ml", "c", cache("Failed"))
    assert failed.hold == SourceHold(MODEL_CACHE_FAILED, "ModelCache ml/c failed: it is Failed",
                                     failed=True)  # fmt: skip
    assert running.source is None
    assert failed.source is None


def test_a_ready_cache_gives_its_path_unless_its_spec_moved_on() -> None:
    assert binding("ml", "c", cache("Ready", path="pvc://c-cache/c/x")) == CacheBinding(
        source="pvc://c-cache/c/x"
    )
    stale = binding("ml", "c", cache("Ready", generation=2, observed=1, path="pvc://old"))
    assert stale.source is None
    assert stale.hold is not None
    assert stale.hold.reason == MODEL_CACHE_NOT_READY
    assert binding("ml", "c", cache("Ready")) == NO_CACHE  # Ephemeral: nothing cached ahead


def test_the_binding_is_written_into_the_model_body() -> None:
    desired: dict[str, Any] = {
        "metadata": {"annotations": {"a": "b"}},
        "spec": {"source": "hf://o/m"},
    }
    bound = apply_binding(desired, CacheBinding(source="pvc://c/x"))
    assert bound["spec"]["source"] == "pvc://c/x"
    assert bound["metadata"]["annotations"] == {"a": "b"}
    held = apply_binding(desired, binding("ml", "c", None))
    assert held["spec"]["source"] == "hf://o/m"
    assert source_hold(held["metadata"]["annotations"]) == binding("ml", "c", None).hold
    assert desired["metadata"]["annotations"] == {"a": "b"}  # the input is left as it was


def test_an_unreadable_hold_still_holds() -> None:
    hold = source_hold({SOURCE_HOLD_ANNOTATION: "not json"})
    assert hold is not None
    assert hold.reason == "InvalidSourceHold"
    assert source_hold({}) is None
