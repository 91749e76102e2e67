"""A ModelCatalog's status from one sync's per-registry results.

Two conditions, as the Model conditions of ``core.status`` (observedGeneration set, the
transition time kept while the status holds):

* ``Synced``: whether the last sync read every registry. Reasons: ``SyncSucceeded``;
  ``RegistryUnavailable`` when any registry failed in a way that may pass (it is retried
  with backoff); else the one reason every failed registry shares
  (``AuthenticationFailed``, ``SecretNotFound``, ``InvalidRegistry``,
  ``RegistryTypeNotSupported``, ``RegistryFailed``), or ``RegistryFailed`` when they differ.
  The message names each failed registry with its own reason.
* ``Ready``: whether ``entries`` hold anything the current spec lists: ``Synced`` (every
  registry), ``PartiallySynced`` (some), or False with ``NoRegistrySynced``.

A registry that fails temporarily keeps the entries it had, if they were listed for the
same generation: an outage of one registry does not blank its models from the catalog.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from flexinfer_common.api import Condition, ModelCatalog, ModelCatalogStatus
from flexinfer_common.api.catalog import CatalogEntry as ApiEntry
from flexinfer_common.api.meta import set_condition
from flexinfer_common.errors import FlexInferError, InvalidSpecError, TemporaryError
from flexinfer_controller.catalog.errors import RegistryAuthError
from flexinfer_controller.catalog.registries import (
    RegistryResult,
    RegistrySecretError,
    UnsupportedRegistryError,
)

SYNCED = "Synced"
READY = "Ready"
SYNC_SUCCEEDED = "SyncSucceeded"
REGISTRY_UNAVAILABLE = "RegistryUnavailable"
REGISTRY_FAILED = "RegistryFailed"
MAX_MESSAGE = 4096  # conditions allow 32 KiB; a table column needs far less
MAX_SKIPPED_SHOWN = 5

_REASONS: tuple[tuple[type[FlexInferError], str], ...] = (
    (TemporaryError, REGISTRY_UNAVAILABLE),
    (UnsupportedRegistryError, "RegistryTypeNotSupported"),
    (RegistrySecretError, "SecretNotFound"),
    (RegistryAuthError, "AuthenticationFailed"),
    (InvalidSpecError, "InvalidRegistry"),
)


def failure_reason(error: FlexInferError) -> str:
    """The condition reason of one registry's failure."""
    return next((r for kind, r in _REASONS if isinstance(error, kind)), REGISTRY_FAILED)


def condition(catalog: ModelCatalog, kind: str) -> Condition | None:
    """The catalog's condition of type ``kind``, if set."""
    return next((c for c in catalog.status.conditions if c.type == kind), None)


def retrying(catalog: ModelCatalog) -> bool:
    """Whether the last sync left a registry to retry soon (a temporary failure)."""
    synced = condition(catalog, SYNCED)
    return synced is not None and synced.reason == REGISTRY_UNAVAILABLE


def build_status(
    catalog: ModelCatalog, results: Sequence[RegistryResult], now: datetime
) -> ModelCatalogStatus:
    """The status after a sync that ended at ``now``."""
    entries = _entries(catalog, results)
    gen = catalog.metadata.generation
    synced, ready = _synced(results, len(entries)), _ready(results, len(entries))
    conditions = list(catalog.status.conditions)
    for kind, (ok, reason, message) in ((SYNCED, synced), (READY, ready)):
        cond = Condition(
            type=kind,
            status="True" if ok else "False",
            reason=reason,
            message=message[:MAX_MESSAGE],
            observed_generation=gen,
        )
        conditions = set_condition(conditions, cond)
    return ModelCatalogStatus(
        entries=entries, total_models=len(entries), last_sync_time=now, conditions=conditions
    )


def _entries(catalog: ModelCatalog, results: Sequence[RegistryResult]) -> list[ApiEntry]:
    found = [e for r in results for e in r.entries]
    kept = _kept(catalog, results)
    listed = [ApiEntry(name=e.name, registry=e.registry, reference=e.reference, size=e.size)
              for e in found]  # fmt: skip
    return sorted(listed + kept, key=lambda e: (e.registry, e.name))


def _kept(catalog: ModelCatalog, results: Sequence[RegistryResult]) -> list[ApiEntry]:
    """The previous entries of registries that failed temporarily, for an unchanged spec."""
    synced = condition(catalog, SYNCED)
    if synced is None or synced.observed_generation != catalog.metadata.generation:
        return []
    down = {r.label for r in results if isinstance(r.error, TemporaryError)}
    return [e for e in catalog.status.entries if e.registry in down]


def _synced(results: Sequence[RegistryResult], total: int) -> tuple[bool, str, str]:
    failed = [r for r in results if r.error is not None]
    listed = len(results) - len(failed)
    summary = f"{total} models from {listed} of {len(results)} registries"
    notes = [_failure_line(r) for r in failed] + _skipped_lines(results)
    message = "; ".join([summary, *notes])
    if not failed:
        return True, SYNC_SUCCEEDED, message
    reasons = {failure_reason(r.error) for r in failed if r.error is not None}
    if REGISTRY_UNAVAILABLE in reasons:
        return False, REGISTRY_UNAVAILABLE, message
    return False, reasons.pop() if len(reasons) == 1 else REGISTRY_FAILED, message


def _failure_line(result: RegistryResult) -> str:
    error = result.error
    assert error is not None
    retry = " (retrying)" if isinstance(error, TemporaryError) else ""
    return f"{result.label} failed{retry}: {failure_reason(error)}: {error}"


def _skipped_lines(results: Sequence[RegistryResult]) -> list[str]:
    skipped = [(ref, err) for r in results for ref, err in r.skipped.items()]
    lines = [f"skipped {ref}: {err}" for ref, err in skipped[:MAX_SKIPPED_SHOWN]]
    if len(skipped) > MAX_SKIPPED_SHOWN:
        lines.append(f"and {len(skipped) - MAX_SKIPPED_SHOWN} more entries skipped")
    return lines


def _ready(results: Sequence[RegistryResult], total: int) -> tuple[bool, str, str]:
    listed = sum(1 for r in results if r.error is None)
    message = f"{total} models listed from {listed} of {len(results)} registries"
    if listed == len(results):
        return True, "Synced", message
    if listed:
        return True, "PartiallySynced", message
    return False, "NoRegistrySynced", message
