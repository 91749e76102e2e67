"""A grown ``spec.storageSize`` raises the cache PVC's request; a smaller one is refused.

A PersistentVolumeClaim can only grow (and only where its StorageClass allows expansion),
so a shrink is not sent: the ``StorageResized`` condition says why (False,
``ShrinkRefused``) and the claim keeps its size. An expansion the apiserver refuses is said
the same way (``ExpansionRejected``); the cache stays usable at its size either way. Once
spec and claim agree again, a False condition turns True (``Applied``). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from flexinfer_common.api import ModelCache
from flexinfer_common.api.meta import Condition
from flexinfer_controller.runtime.kubernetes import quantity
from flexinfer_controller.runtime.kubernetes.names import Obj

CONDITION = "StorageResized"


@dataclass(frozen=True)
class Resize:
    """What to do about the claim's size, and what to say of it."""

    grow_to: str | None
    """The storage request to patch onto the claim; None: none."""
    condition: Condition | None
    """The StorageResized condition to set; None: leave it as it is."""


def requested(claim: Obj) -> str:
    """The claim's spec.resources.requests.storage ("" when it has none)."""
    resources = (claim.get("spec") or {}).get("resources") or {}
    return str((resources.get("requests") or {}).get("storage") or "")


def _condition(cache: ModelCache, ok: bool, reason: str, message: str) -> Condition:
    return Condition(type=CONDITION, status="True" if ok else "False", reason=reason,
                     message=message, observed_generation=cache.metadata.generation)  # fmt: skip


def resize(cache: ModelCache, claim: Obj) -> Resize:
    """The step for ``cache``'s own live ``claim``."""
    wanted, current = cache.spec.storage_size, requested(claim)
    grown, had = quantity.parse(wanted), quantity.parse(current)
    if grown is None or had is None:
        return Resize(None, None)  # not a quantity: the claim's create was refused already
    if grown == had:
        previous = next((c for c in cache.status.conditions if c.type == CONDITION), None)
        if previous is not None and previous.status == "False":
            return Resize(None, _condition(cache, True, "Applied", f"the claim requests {current}"))
        return Resize(None, None)
    if grown > had:
        message = (f"the claim's request raised from {current} to {wanted}; the volume grows "
                   "if its StorageClass allows expansion")  # fmt: skip
        return Resize(wanted, _condition(cache, True, "Expanded", message))
    message = (f"spec.storageSize {wanted} is below the claim's {current}: a "
               "PersistentVolumeClaim cannot shrink, so it keeps its size")  # fmt: skip
    return Resize(None, _condition(cache, False, "ShrinkRefused", message))


def rejected(cache: ModelCache, wanted: str, why: str) -> Condition:
    """The condition of an expansion the apiserver refused."""
    message = f"raising the claim's request to {wanted} was refused: {why}"[:4096]
    return _condition(cache, False, "ExpansionRejected", message)
