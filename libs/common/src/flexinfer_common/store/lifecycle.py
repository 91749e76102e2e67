"""Deletion with finalizers, as the Kubernetes API server does it, for stores that are not one.

A delete of an object that carries finalizers only stamps ``deletionTimestamp``; the object
stays, readable, until its controller has cleaned up and removed the last finalizer, and
then the write that empties the list deletes it. Clients cannot set or clear the stamp,
nor add a finalizer to an object that is being deleted. The Kubernetes store gets all of
this from the API server; the SQL store applies these rules inside its write transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from flexinfer_common.errors import InvalidSpecError

DELETION_TIMESTAMP = "deletionTimestamp"
FINALIZERS = "finalizers"


@dataclass(frozen=True, slots=True)
class MetaWrite:
    """The metadata a replace stores, and whether that write completes a deletion."""

    meta: dict[str, Any]
    delete: bool


def replace_meta(key: str, current: Mapping[str, Any], wanted: Mapping[str, Any]) -> MetaWrite:
    """Merge a client's metadata onto the stored one under the deletion rules."""
    meta = dict(wanted)
    stamp = current.get(DELETION_TIMESTAMP)
    if stamp is None:
        meta.pop(DELETION_TIMESTAMP, None)  # only a delete sets it
        return MetaWrite(meta, delete=False)
    meta[DELETION_TIMESTAMP] = stamp
    added = set(meta.get(FINALIZERS) or ()) - set(current.get(FINALIZERS) or ())
    if added:
        names = ", ".join(sorted(added))
        raise InvalidSpecError(f"{key} is being deleted: finalizer {names} cannot be added")
    return MetaWrite(meta, delete=not meta.get(FINALIZERS))


def delete_meta(current: Mapping[str, Any], now: datetime | None = None) -> dict[str, Any] | None:
    """The stamped metadata when finalizers hold the object back; None: delete it now."""
    if not current.get(FINALIZERS):
        return None
    if current.get(DELETION_TIMESTAMP) is not None:
        return dict(current)  # already being deleted: a second delete changes nothing
    stamp = (now or datetime.now(UTC)).isoformat().replace("+00:00", "Z")
    return {**current, DELETION_TIMESTAMP: stamp}
