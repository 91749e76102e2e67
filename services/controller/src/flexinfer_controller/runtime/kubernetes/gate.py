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
Model is Failed, like a source the local cache can never fetch; a new spec renders Jobs
with new names and the gate waits for those.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flexinfer_common.api import Model
from flexinfer_common.errors import InvalidSpecError
from flexinfer_controller.core.cache import CacheState, CacheStatus, Notify
from flexinfer_controller.runtime.kubernetes import cache
from flexinfer_controller.runtime.kubernetes.names import COMPONENT_LABEL, Obj

GATED = ("prefetch", "quantize")
"""The Job components the engine waits for, in the order they run."""


def _condition(job: Obj, kind: str) -> dict[str, Any] | None:
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return dict(condition)
    return None


def job_state(job: Obj) -> CacheState:
    """One Job's answer: ready once it succeeded, failed once it gave up, else pending."""
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
            f"the {component} Job {name} failed ({why}); fix the spec to retry with a new Job",
        )
    return CacheState.pending(f"{title}Running", f"the {component} Job {name} is running")


def jobs_state(jobs: list[Obj]) -> CacheState:
    """The gate over the Model's Jobs in order: the first one not done decides."""
    ordered = sorted(jobs, key=lambda j: GATED.index(_component(j)))
    for job in ordered:
        state = job_state(job)
        if state.status is not CacheStatus.READY:
            return state
    names = ", ".join(j["metadata"]["name"] for j in ordered)
    # path None: the engine mounts the cache volume, no local directory is prepared.
    return CacheState(CacheStatus.READY, "Cached", f"the cache Jobs succeeded: {names}")


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


class JobGate:
    """The kubernetes runtime's ModelCache: the prefetch and quantize Jobs' status."""

    def __init__(self, poll_s: float, running: Callable[[str], bool]) -> None:
        self._poll_s = poll_s
        self._running = running
        self._notify: Notify = lambda key: None
        self._records: dict[str, _Record] = {}
        self._polls: dict[str, asyncio.TimerHandle] = {}

    def bind(self, notify: Notify) -> JobGate:
        """Re-queue Models through ``notify`` when their Jobs' state moves."""
        self._notify = notify
        return self

    def record(self, model: Model, jobs: list[Obj]) -> None:
        """The live gated Jobs of ``model``'s current spec, as the reconcile just read them."""
        state = jobs_state([j for j in jobs if gated(j)])
        previous = self._records.get(model.key)
        self._records[model.key] = _Record(_jobs_key(model), state)
        if previous != self._records[model.key]:
            self._notify(model.key)  # the plan of this reconcile saw the old state

    def ensure(self, model: Model) -> CacheState:
        """The state recorded for ``model``'s spec; pending until its Jobs were read."""
        try:
            plan = cache.plan(model, needs_volume=True)
        except InvalidSpecError as exc:
            return CacheState.failed("InvalidSource", str(exc))
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
        return state

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
        handle = self._polls.pop(key, None)
        if handle is not None:
            handle.cancel()

    async def close(self) -> None:
        """Stop polling."""
        for handle in self._polls.values():
            handle.cancel()
        self._polls.clear()
