"""Operator actions on a Model that live in its annotations: pin and unload.

They are annotations, not spec fields, because they are actions on a running Model rather
than a description of it (and the API has no ``spec.gpu.pinned``): the admin API, the CLI
and ``kubectl annotate`` all set them the same way, and a restarted controller reads them
back (level-triggered).

* ``flexinfer.ai/pinned: "true"``: the shared-GPU arbiter never evicts the Model.
* ``flexinfer.ai/unloaded-at: <RFC 3339 time>``: the serverless rule ignores activity up
  to that moment, so the Model scales to zero now; the first request after it brings the
  Model back, as after an idle timeout.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from flexinfer_common.api.meta import ObjectMeta
from flexinfer_common.api.model import ModelSpec

PINNED_ANNOTATION = "flexinfer.ai/pinned"
UNLOADED_AT_ANNOTATION = "flexinfer.ai/unloaded-at"


def is_pinned(meta: ObjectMeta) -> bool:
    """Whether the Model carries ``flexinfer.ai/pinned: "true"``."""
    return pinned_in(meta.annotations)


def pinned_in(annotations: Mapping[str, object]) -> bool:
    """Whether these annotations (of a Model as a plain document) pin it."""
    return str(annotations.get(PINNED_ANNOTATION, "")).strip().lower() == "true"


def unload_stamp(now: datetime | None = None) -> str:
    """The annotation value for an unload at ``now`` (default: this moment), in UTC."""
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def unloaded_at(meta: ObjectMeta) -> datetime | None:
    """When the Model was last unloaded by hand; None when never (or unreadable).

    An unreadable value is ignored rather than refused: the annotation may have been
    written by ``kubectl annotate``, and a typo must not stop the Model from serving.
    """
    value = meta.annotations.get(UNLOADED_AT_ANNOTATION)
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def unload_refusal(spec: ModelSpec) -> str | None:
    """Why a Model cannot be unloaded (its spec keeps replicas up by itself), or None."""
    if spec.is_external:
        return "it is served by spec.endpoints: no engine runs to unload"
    serverless = spec.serverless_or_default
    if not serverless.enabled:
        return "spec.serverless.enabled is false: it always runs a replica"
    if serverless.min_replicas > 0:
        return f"spec.serverless.minReplicas is {serverless.min_replicas}: it keeps that many"
    if not serverless.scale_to_zero:
        return "spec.serverless.scaleToZero is false: it keeps one replica"
    return None
