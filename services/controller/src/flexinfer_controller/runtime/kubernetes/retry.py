"""When a failed prefetch/quantize Job of a Model is run again: exponential backoff per attempt.

A Job that gave up (its pods failed ``backoffLimit`` times) stays failed as Kubernetes leaves
it; a registry outage that outlasts those pod retries would otherwise fail the Model until
its spec changes. The gate keeps the Model Failed with the Job's reason, and once
``RetryPolicy.delay(attempt)`` has passed since the Job failed, the runtime deletes the Job
and creates it again (the same name: it is rendered from the same spec), annotated with the
next attempt.

Both inputs of the retry time live on the Job, so a restarted controller continues the
backoff where it was: the attempt in ``ATTEMPT_ANNOTATION`` and the failure time in the
``Failed`` condition's ``lastTransitionTime``. Only a controller stopped between the delete
and the create (one pass, no await between them but the two calls) starts again at 1.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime

from flexinfer_controller.runtime.kubernetes.names import Obj

ATTEMPT_ANNOTATION = "flexinfer.ai/job-attempt"
"""On a Model's gated Job: which run of this spec's Job it is (absent: the first)."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Seconds before a failed Job's attempt ``n`` is followed by ``n + 1``."""

    initial_s: float
    max_s: float

    def delay(self, attempt: int) -> float:
        """``initial_s`` doubled per attempt after the first, at most ``max_s``."""
        return float(min(self.initial_s * 2 ** max(attempt - 1, 0), self.max_s))


@dataclass(frozen=True, slots=True)
class Retry:
    """The failed Job ``job`` (attempt ``attempt``) is run again at ``at`` (epoch seconds)."""

    job: str
    attempt: int
    at: float


def attempt_of(job: Obj) -> int:
    """The Job's attempt (1 when not annotated or unreadable)."""
    raw = ((job.get("metadata") or {}).get("annotations") or {}).get(ATTEMPT_ANNOTATION)
    try:
        return max(int(raw), 1) if raw is not None else 1
    except ValueError:
        return 1


def failed_at(job: Obj) -> float | None:
    """When the Job's Failed condition became True (None: not written, or unreadable)."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            stamp = condition.get("lastTransitionTime")
            try:
                return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
            except ValueError:
                return None
    return None


def with_attempt(job: Obj, attempt: int) -> Obj:
    """A copy of the rendered Job annotated as run ``attempt``."""
    out = copy.deepcopy(job)
    annotations = out["metadata"].setdefault("annotations", {})
    annotations[ATTEMPT_ANNOTATION] = str(attempt)
    return out
