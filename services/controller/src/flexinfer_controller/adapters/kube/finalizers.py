"""Add or remove a finalizer, retrying when the object changed in between.

The finalizer list is written whole, guarded by the resourceVersion it was computed
from, so a concurrent writer's finalizer is never lost; on a conflict the object is read
again and the change recomputed.
"""

from __future__ import annotations

from flexinfer_common.errors import ConflictError, NotFoundError
from flexinfer_common.kube.client import Obj
from flexinfer_controller.adapters.kube.objects import CustomObjects, version_guard

ATTEMPTS = 8


async def _edit(
    objects: CustomObjects, namespace: str, name: str, finalizer: str, add: bool
) -> Obj | None:
    for _ in range(ATTEMPTS):
        try:
            found = await objects.get(namespace, name)
        except NotFoundError:
            if add:
                raise
            return None  # gone already: nothing holds it
        meta = found["metadata"]
        current: list[str] = list(meta.get("finalizers") or [])
        if (finalizer in current) == add:
            return found
        wanted = [*current, finalizer] if add else [f for f in current if f != finalizer]
        ops = [
            *version_guard(str(meta["resourceVersion"])),
            {"op": "add", "path": "/metadata/finalizers", "value": wanted},
        ]
        try:
            return await objects.json_patch(namespace, name, ops)
        except ConflictError:
            continue
        except NotFoundError:
            if add:
                raise
            return None
    raise ConflictError(
        f"{objects.resource.plural} {namespace}/{name} kept changing: finalizer {finalizer}"
        f" not {'added' if add else 'removed'} after {ATTEMPTS} attempts"
    )


async def add_finalizer(objects: CustomObjects, namespace: str, name: str, finalizer: str) -> Obj:
    """The object with ``finalizer`` (added if missing); NotFoundError if there is none."""
    found = await _edit(objects, namespace, name, finalizer, add=True)
    assert found is not None
    return found


async def remove_finalizer(
    objects: CustomObjects, namespace: str, name: str, finalizer: str
) -> Obj | None:
    """The object without ``finalizer``; None when it is gone (the last finalizer freed it)."""
    found = await _edit(objects, namespace, name, finalizer, add=False)
    if (
        found is not None
        and found["metadata"].get("deletionTimestamp")
        and not found["metadata"].get("finalizers")
    ):
        return None  # that was the last finalizer: the apiserver deleted the object
    return found
