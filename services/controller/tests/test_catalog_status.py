"""A catalog's status from per-registry results (catalog.status): reasons, kept entries."""

from __future__ import annotations

from datetime import UTC, datetime

from flexinfer_common.api import ModelCatalog
from flexinfer_controller.catalog.errors import RegistryAuthError, RegistryUnavailableError
from flexinfer_controller.catalog.registries import RegistryResult
from flexinfer_controller.catalog.status import build_status, failure_reason
from flexinfer_controller.catalog.types import CatalogEntry

NOW = datetime(2025, 6, 1, tzinfo=UTC)
A, B = "oci://a.example", "oci://b.example"


def catalog() -> ModelCatalog:
    return ModelCatalog.model_validate({
        "metadata": {"name": "team", "generation": 1},
        "spec": {"registries": [{"type": "OCI", "url": A}, {"type": "OCI", "url": B}]},
    })  # fmt: skip


def entry(registry: str, name: str) -> CatalogEntry:
    return CatalogEntry(name, registry, f"{registry}/{name}@sha256:{'0' * 64}", 1)


def reasons(status_catalog: ModelCatalog) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in status_catalog.status.conditions}


def test_a_registry_down_keeps_its_entries_of_the_same_generation() -> None:
    first = catalog()
    first.status = build_status(
        first, [RegistryResult(A, (entry(A, "m:v1"),)), RegistryResult(B, (entry(B, "n:v1"),))],
        NOW,
    )  # fmt: skip
    assert reasons(first) == {"Synced": ("True", "SyncSucceeded"), "Ready": ("True", "Synced")}
    down = RegistryUnavailableError("b.example", "503", delay=2)
    second = first.model_copy(deep=True)
    second.status = build_status(
        first, [RegistryResult(A, (entry(A, "m:v2"),)), RegistryResult(B, error=down)], NOW
    )
    assert [(e.registry, e.name) for e in second.status.entries] == [(A, "m:v2"), (B, "n:v1")]
    assert reasons(second)["Synced"] == ("False", "RegistryUnavailable")
    # A new generation drops what was listed for the old one.
    changed = second.model_copy(deep=True)
    changed.metadata.generation = 2
    third = build_status(changed, [RegistryResult(A), RegistryResult(B, error=down)], NOW)
    assert third.entries == []


def test_a_temporary_failure_outranks_permanent_ones_in_the_reason() -> None:
    refused = RegistryAuthError("a.example", "401")
    down = RegistryUnavailableError("b.example", "timeout")
    both = build_status(catalog(), [RegistryResult(A, error=refused),
                                    RegistryResult(B, error=down)], NOW)  # fmt: skip
    synced = next(c for c in both.conditions if c.type == "Synced")
    assert synced.reason == "RegistryUnavailable"
    assert f"{A} failed: AuthenticationFailed" in synced.message
    assert f"{B} failed (retrying): RegistryUnavailable" in synced.message
    assert failure_reason(refused) == "AuthenticationFailed"
