"""What a failed reconcile of a Model leaves in its status, and when it is tried again.

Issue 11's error contract, for the Model loop:

- ``PermanentError`` (the apiserver refused an object as written, say): the Model goes
  Failed, with a ``Reconciled=False`` condition giving the reason and the message at the
  generation that failed. It is not reconciled again until its spec (generation) changes;
  a restarted controller tries once more, as it does for a crash loop.
- ``TemporaryError(delay)``: ``Reconciled=False`` says what failed and in how many seconds
  it is retried; the worker queues the retry then (the backoff's delay when longer, so that
  an error that keeps coming is not retried hot either).
- Anything else (a bug, an error without a verdict) keeps the workers' backoff, and shows in
  the condition from the ``SURFACE_AFTER``-th failure in a row.

Until a failed key's retry is due, reconciles of it wait for that time: the condition write
changes the Model, and on Kubernetes that change comes back as an event, which would retry
at once otherwise. The first reconcile that gets through removes the condition.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from flexinfer_common.api import Model, ModelStatus
from flexinfer_common.errors import PermanentError, TemporaryError
from flexinfer_controller.core.status import failed_status, retrying_status
from flexinfer_controller.core.workers import Backoff

SURFACE_AFTER = 3
"""Failures in a row before an error that is neither permanent nor temporary shows in
status. The backoff retries after 0.2, 0.4 and 0.8 s: a one-off (a dropped connection, a
race with a delete) is gone by the second try without a status write, and what keeps
failing is shown after about 1.5 s, long before anyone looks."""


class Failures:
    """Per Model key: the generation held by a PermanentError, and when a retry is due."""

    def __init__(self, backoff: Backoff, clock: Callable[[], float] = time.monotonic) -> None:
        self._backoff = backoff
        self._clock = clock
        """The work queue's clock (the event loop's is ``time.monotonic``)."""
        self._held: dict[str, int] = {}
        self._retry_at: dict[str, tuple[int, float]] = {}

    def held(self, model: Model) -> bool:
        """Whether a PermanentError holds this generation of ``model``."""
        return self._held.get(model.key) == _generation(model)

    def wait_s(self, model: Model) -> float:
        """Seconds until a retry of ``model``'s failed reconcile is due (0: go ahead).

        A new generation goes ahead at once: the spec change may be the fix.
        """
        generation, due = self._retry_at.get(model.key, (None, 0.0))
        if generation != _generation(model):
            return 0.0
        return max(0.0, due - self._clock())

    def permanent(self, model: Model, exc: PermanentError) -> ModelStatus:
        """The Failed status to write for ``exc``; ``hold`` once it is written."""
        reason = _reason(exc.status_reason, "ReconcileFailed")
        message = f"{exc}; not retried until the spec changes"
        return failed_status(model, reason, message)

    def hold(self, model: Model) -> None:
        """Reconcile ``model`` no more until its generation changes."""
        self._held[model.key] = _generation(model)
        self._retry_at.pop(model.key, None)

    def retrying(self, model: Model, exc: Exception) -> ModelStatus | None:
        """Note a failure the worker retries; the status telling it (None: not yet)."""
        key = model.key
        delay = self._backoff.next_delay(key, exc)
        count = self._backoff.failures(key) + 1
        self._retry_at[key] = (_generation(model), self._clock() + delay)
        if isinstance(exc, TemporaryError):
            reason = _reason(exc.status_reason, "Retrying")
            return retrying_status(model, reason, f"{exc}; retrying in {delay:.1f}s")
        if count < SURFACE_AFTER:
            return None
        message = f"{type(exc).__name__}: {exc}; failed {count} times in a row, retrying in "
        return retrying_status(model, "ReconcileError", f"{message}{delay:.1f}s")

    def succeeded(self, key: str) -> None:
        """A reconcile of ``key`` got through: nothing is held or pending any more."""
        self._held.pop(key, None)
        self._retry_at.pop(key, None)

    forget = succeeded
    """The Model is gone."""


def _generation(model: Model) -> int:
    return model.metadata.generation or 1


def _reason(reason: str | None, default: str) -> str:
    """``reason`` when it is a condition reason (CamelCase, as the apiserver's), else
    ``default``: metav1.Condition refuses anything else."""
    if reason and reason[0].isalpha() and reason.replace("_", "").isalnum():
        return reason
    return default
