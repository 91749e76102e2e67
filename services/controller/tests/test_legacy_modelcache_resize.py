"""The legacy ModelCache's PVC resize step: expansion only, by value, said in a condition."""

from __future__ import annotations

from typing import Any

import pytest

from flexinfer_common.api import ModelCache
from flexinfer_common.api.meta import Condition
from flexinfer_controller.legacy.modelcache.resize import CONDITION, rejected, resize
from flexinfer_controller.legacy.modelcache.testing import cache_manifest, sample_cache


def cache(size: str, condition: Condition | None = None) -> ModelCache:
    """A ModelCache asking for ``size``, with ``condition`` in its status."""
    found = sample_cache(cache_manifest("c", source="hf://org/m", storageSize=size), generation=3)
    if condition is None:
        return found
    status = found.status.model_copy(update={"conditions": [condition]})
    return found.model_copy(update={"status": status})


def claim(size: str) -> dict[str, Any]:
    """A live PVC requesting ``size``."""
    return {"spec": {"resources": {"requests": {"storage": size}}}}


def test_a_grown_size_is_patched_and_said() -> None:
    step = resize(cache("100Gi"), claim("50Gi"))
    assert step.grow_to == "100Gi"
    assert step.condition is not None
    assert (step.condition.type, step.condition.status, step.condition.reason) == (
        CONDITION, "True", "Expanded",
    )  # fmt: skip
    assert step.condition.observed_generation == 3


def test_a_smaller_size_is_refused_never_patched() -> None:
    step = resize(cache("10Gi"), claim("50Gi"))
    assert step.grow_to is None
    assert step.condition is not None
    assert (step.condition.status, step.condition.reason) == ("False", "ShrinkRefused")
    assert "10Gi" in step.condition.message
    assert "50Gi" in step.condition.message


@pytest.mark.parametrize(("wanted", "live"), [("1Gi", "1024Mi"), ("50Gi", "50Gi")])
def test_the_same_amount_in_any_spelling_changes_nothing(wanted: str, live: str) -> None:
    step = resize(cache(wanted), claim(live))
    assert (step.grow_to, step.condition) == (None, None)


def test_agreeing_again_after_a_refusal_clears_it() -> None:
    refused = resize(cache("10Gi"), claim("50Gi")).condition
    step = resize(cache("50Gi", refused), claim("50Gi"))
    assert step.grow_to is None
    assert step.condition is not None
    assert (step.condition.status, step.condition.reason) == ("True", "Applied")


def test_a_claim_without_a_quantity_is_left_alone() -> None:
    assert resize(cache("10Gi"), {"spec": {}}) == resize(cache("lots"), claim("1Gi"))
    assert resize(cache("10Gi"), {"spec": {}}).grow_to is None


def test_a_refused_expansion_names_why() -> None:
    condition = rejected(cache("100Gi"), "100Gi", "storageclass does not allow expansion")
    assert (condition.status, condition.reason) == ("False", "ExpansionRejected")
    assert condition.message.endswith("storageclass does not allow expansion")
