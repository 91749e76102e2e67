"""The cache gate on Kubernetes: a Model's weights are ready when its Jobs say so.

A fetched source (hf://, s3://, gs://, ngc://, oci://) is downloaded into the cache
volume by the prefetch Job, and converted by the quantize Job when spec.quantize is set.
``JobGate`` is the ``ModelCache`` of the kubernetes runtime: its answer comes from those
Jobs' status as the apiserver last reported it, so no replica starts before they finished.

The Jobs are read with a GET at every reconcile (``KubernetesRuntime.ensure`` reads each
rendered object before it decides whether to create it) and handed to ``record``; no
watch of Jobs runs. While a Job runs, the gate re-queues the Model every ``poll_s`` so
that its completion is seen; a state that moved re-queues it at once.

A failed Job is final as Kubernetes leaves it (no retries past its backoffLimit), so the
Model is Failed with the Job's reason (requests get the error at once). With a
``RetryPolicy`` the gate names when it is run again (``retry``): once that time has come,
``retry_due`` tells the runtime to delete the Job and create it afresh, and the gate waits
for that one. A new spec renders Jobs with new names and the gate waits for those. A Job
its pod failure policy failed (the program refused the request) is not run again: only a
new spec can change its answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from flexinfer_common.api import Model
from flexinfer_common.errors import InvalidSpecError
from flexinfer_controller.core.cache import CacheState, CacheStatus, Notify
from flexinfer_controller.runtime.kubernetes import cache
from flexinfer_controller.runtime.kubernetes.names import COMPONENT_LABEL, Obj
from flexinfer_controller.runtime.kubernetes.retry import Retry, RetryPolicy, attempt_of, failed_at

SPEC_HINT = "fix the spec to retry with a new Job"
"""What ends a failed Job's message where nothing runs it again (ModelCaches, no policy)."""

POD_FAILURE_POLICY = "PodFailurePolicy"
"""The Failed condition's reason when a FailJob rule of the Job's pod failure policy matched."""
GATED = ("prefetch", "quantize")
"""The Job components the engine waits for, in the order they run."""


def _condition(job: Obj, kind: str) -> dict[str, Any] | None:
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return dict(condition)
    return None


def job_state(job: Obj, hint: str = SPEC_HINT) -> CacheState:
    """One Job's answer: ready once it succeeded, failed once it gave up (its message ending
    in ``hint``: what happens next), else pending."""
    name = job["metadata"]["name"]
    component = job["metadata"].get("labels", {}).get(COMPONENT_LABEL, "prefetch")
    title = component.capitalize()
    status = job.get("status") or {}
    if int(status.get("succeeded") or 0) >= 1 or _condition(job, "Complete"):
        return CacheState(CacheStatus.READY, "Cached", f"the {component} Job {name} succeeded")
    failed = _condition(job, "Failed")
    limit = (job.get("spec") or {}).get("backoffLimit")
    if failed is None and limit is not None and int(status.get("failed") or 0) > int(limit):
        failed = {"reason": "BackoffLimitExceeded", "message": "Job has reached the backoff limit"}
    if failed is not None:
        why = f"{failed.get('reason') or 'Failed'}: {failed.get('message') or ''}".rstrip(": ")
        return CacheState.failed(
            f"{title}Failed",
            f"the {component} Job {name} failed ({why}); {hint}",
        )
    return CacheState.pending(f"{title}Running", f"the {component} Job {name} is running")


def _ordered(jobs: list[Obj]) -> list[Obj]:
    return sorted(jobs, key=lambda j: GATED.index(_component(j)))


def jobs_state(jobs: list[Obj]) -> CacheState:
    """The gate over the Model's Jobs in order: the first one not done decides."""
    ordered = _ordered(jobs)
    for job in ordered:
        state = job_state(job)
        if state.status is not CacheStatus.READY:
            return state
    names = ", ".join(j["metadata"]["name"] for j in ordered)
    # path None: the engine mounts the cache volume, no local directory is prepared.
    return CacheState(CacheStatus.READY, "Cached", f"the cache Jobs succeeded: {names}")


def refused(jobs: list[Obj]) -> bool:
    """Whether the first failed Job was failed by its pod failure policy: its program
    refused the request, and running it again would only refuse again."""
    for job in _ordered(jobs):
        failed = _condition(job, "Failed")
        if failed is not None:
            return failed.get("reason") == POD_FAILURE_POLICY
    return False


def _component(job: Obj) -> str:
    return str(job["metadata"].get("labels", {}).get(COMPONENT_LABEL, ""))


def gated(job: Obj) -> bool:
    """Whether the engine waits for this Job (the prefetch and quantize Jobs)."""
    return job.get("kind") == "Job" and _component(job) in GATED


def _jobs_key(model: Model) -> str:
    """What the gated Jobs are rendered from: a new value means new Jobs (new names)."""
    spec = model.spec
    cache_spec = spec.cache.model_dump(mode="json") if spec.cache is not None else None
    return json.dumps([spec.source, cache_spec, spec.quantize], sort_keys=True, default=str)


@dataclass(frozen=True, slots=True)
class _Record:
    jobs_key: str
    state: CacheState
    retry: Retry | None = None


class JobGate:
    """The kubernetes runtime's ModelCache: the prefetch and quantize Jobs' status."""

    def __init__(
        self,
        poll_s: float,
        running: Callable[[str], bool],
        retry: RetryPolicy | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._poll_s = poll_s
        self._running = running
        self._policy = retry
        self._clock = clock  # wall clock: retry times are reckoned from the Job's timestamps
        self._notify: Notify = lambda key: None
        self._records: dict[str, _Record] = {}
        self._polls: dict[str, asyncio.TimerHandle] = {}
        self._retries: dict[str, asyncio.TimerHandle] = {}
        self._seen_failed: dict[str, tuple[str, float]] = {}
        """Model key -> (Job uid, first seen failed): for a Job without a Failed time."""

    def bind(self, notify: Notify) -> JobGate:
        """Re-queue Models through ``notify`` when their Jobs' state moves."""
        self._notify = notify
        return self

    def record(self, model: Model, jobs: list[Obj]) -> None:
        """The live gated Jobs of ``model``'s current spec, as the reconcile just read them."""
        ours = [j for j in jobs if gated(j)]
        state, retry = jobs_state(ours), None
        if state.status is CacheStatus.FAILED and self._policy is not None and not refused(ours):
            retry, state = self._retry(model.key, ours)
        else:
            self._seen_failed.pop(model.key, None)
        previous = self._records.get(model.key)
        self._records[model.key] = _Record(_jobs_key(model), state, retry)
        if previous != self._records[model.key]:
            self._notify(model.key)  # the plan of this reconcile saw the old state

    def ensure(self, model: Model) -> CacheState:
        """The state recorded for ``model``'s spec (pending until its Jobs were read), with
        its CachePlan's strategy for status.cache."""
        try:
            plan = cache.plan(model, needs_volume=True)
        except InvalidSpecError as exc:
            return CacheState.failed("InvalidSource", str(exc))
        return dataclasses.replace(self._state(model, plan), strategy=plan.strategy)

    def _state(self, model: Model, plan: cache.CachePlan) -> CacheState:
        if plan.fetch is None:  # a volume or no cache: nothing to wait for
            return CacheState(CacheStatus.READY, "Cached", "nothing is fetched")
        record = self._records.get(model.key)
        if record is None and self._running(model.key):
            # Not read since this controller started, and its pods run: they were started
            # on a ready cache; stopping them until this reconcile reads the Jobs would not do.
            return CacheState(CacheStatus.READY, "Cached", "the Model's pods are running")
        if record is None or record.jobs_key != _jobs_key(model):
            state = CacheState.pending(
                "PrefetchRunning", "the prefetch Job is being created for this spec"
            )
        else:
            state = record.state
        if state.status is CacheStatus.PENDING:
            self._poll(model.key)
        elif record is not None and record.retry is not None and state is record.state:
            self._wake_at(model.key, record.retry.at)
        return state

    def _retry(self, key: str, jobs: list[Obj]) -> tuple[Retry, CacheState]:
        """When the first failed Job runs again, and the failed state saying so."""
        assert self._policy is not None
        job = next(j for j in _ordered(jobs) if job_state(j).status is CacheStatus.FAILED)
        meta = job["metadata"]
        uid = str(meta.get("uid") or meta["name"])
        seen = self._seen_failed.get(key)
        if seen is None or seen[0] != uid:
            seen = self._seen_failed[key] = (uid, self._clock())
        attempt = attempt_of(job)
        delay = self._policy.delay(attempt)
        retry = Retry(str(meta["name"]), attempt, (failed_at(job) or seen[1]) + delay)
        when = datetime.fromtimestamp(retry.at, UTC).isoformat(timespec="seconds")
        hint = f"attempt {attempt}; run again at {when} ({delay:g}s after it failed)"
        return retry, job_state(job, hint)

    def retry_due(self, model: Model, job: Obj) -> int | None:
        """The attempt to create ``job`` as, now that its failed run is to be replaced
        (None: it is not failed, or not yet due)."""
        record = self._records.get(model.key)
        retry = record.retry if record is not None else None
        if retry is None or record is None or record.jobs_key != _jobs_key(model):
            return None
        if job["metadata"]["name"] != retry.job or job_state(job).status is not CacheStatus.FAILED:
            return None
        return retry.attempt + 1 if self._clock() >= retry.at else None

    def _wake_at(self, key: str, at: float) -> None:
        """Re-queue the Model when its failed Job is due to run again."""
        if key in self._retries:
            return
        delay = max(at - self._clock(), 0.0) + 0.01  # just past it: ``retry_due`` then holds
        loop = asyncio.get_running_loop()
        self._retries[key] = loop.call_later(delay, self._wake, key)

    def _wake(self, key: str) -> None:
        self._retries.pop(key, None)
        self._notify(key)

    def _poll(self, key: str) -> None:
        """Look again in ``poll_s``: nothing watches the Jobs."""
        if key in self._polls:
            return
        loop = asyncio.get_running_loop()
        self._polls[key] = loop.call_later(self._poll_s, self._fire, key)

    def _fire(self, key: str) -> None:
        self._polls.pop(key, None)
        self._notify(key)

    async def release(self, key: str) -> None:
        """The Model is gone: forget its Jobs (the runtime deletes them)."""
        self._records.pop(key, None)
        self._seen_failed.pop(key, None)
        for timers in (self._polls, self._retries):
            handle = timers.pop(key, None)
            if handle is not None:
                handle.cancel()

    async def close(self) -> None:
        """Stop polling."""
        for timers in (self._polls, self._retries):
            for handle in timers.values():
                handle.cancel()
            timers.clear()
