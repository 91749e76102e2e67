"""Cache gating on Kubernetes: a fetched source's Model starts nothing until its Jobs succeed.

An hf:// Model is Pending, with no pod and its Deployment at 0, while its prefetch Job
runs, even under demand; the Job's success (its status, as a Job controller would write
it) lets the demand start a replica; a Job that failed makes the Model Failed with the
Job's reason. With spec.quantize the quantize Job gates the same way after the prefetch.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flexinfer_common.api import Model
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_controller.core.cache import CacheStatus
from flexinfer_controller.kube_settings import KubernetesSettings
from flexinfer_controller.runtime.kubernetes.gate import JobGate, job_state, jobs_state
from flexinfer_controller.runtime.kubernetes.harness import Cluster, model_body, running_cluster
from flexinfer_controller.runtime.kubernetes.kubelet import JOB_COMPLETE, JOB_FAILED
from flexinfer_controller.runtime.kubernetes.names import COMPONENT_LABEL
from flexinfer_controller.runtime.kubernetes.retry import ATTEMPT_ANNOTATION, RetryPolicy
from flexinfer_controller.testing import eventually

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])
_RFC3339 = "%Y-%m-%dT%H:%M:%SZ"


@pytest.fixture
async def cluster(apiserver: KubeApiServer) -> AsyncIterator[Cluster]:
    """The controller on the fake apiserver, reading running Jobs again every 0.2 s."""
    kube = KubernetesSettings(host=apiserver.url, namespaces=["default"], job_poll_s=0.2)
    async with running_cluster(apiserver, kubernetes=kube) as running:
        yield running


def _fetched(**spec: Any) -> dict[str, Any]:
    body = model_body(minReplicas=0)
    body["spec"] |= {"source": "hf://org/tiny", **spec}
    return body


def _job(api: KubeApiServer, component: str) -> dict[str, Any] | None:
    jobs = api.objects("jobs", "default")
    found = [j for j in jobs if j["metadata"]["labels"].get(COMPONENT_LABEL) == component]
    return found[0] if found else None


def _cached(cluster: Cluster) -> dict[str, Any]:
    conditions = cluster.status().get("conditions") or []
    return next((c for c in conditions if c["type"] == "Cached"), {})


async def _gated_by(cluster: Cluster, component: str) -> str:
    """Until the Model is Pending on the ``component`` Job, under demand; the Job's name."""
    # 30 s bounds: a machine loaded by two CI runs at once took longer than 5 s here.
    await eventually(lambda: _job(cluster.api, component) is not None, timeout_s=30.0)
    job = _job(cluster.api, component)
    assert job is not None
    name = str(job["metadata"]["name"])
    await cluster.demand()
    await eventually(
        lambda: (
            bool(cluster.status().get("lastActiveTime"))
            and name in str(_cached(cluster).get("message"))
        ),
        timeout_s=30.0,
    )
    await cluster.wait_phase("Pending")
    assert _cached(cluster)["reason"] == f"{component.capitalize()}Running"
    assert cluster.pods() == []
    deployment = cluster.api.get("deployments", "default", "tiny")
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 0
    return name


async def test_a_prefetch_job_gates_the_start_until_it_succeeded(cluster: Cluster) -> None:
    api = cluster.api
    api.create("models", _fetched())
    name = await _gated_by(cluster, "prefetch")
    assert cluster.status()["phase"] == "Pending"

    assert cluster.status()["cache"]["strategy"] == "SharedPVC"  # the plan's, not "Registry"
    api.set_status("jobs", "default", name, JOB_COMPLETE)
    await eventually(lambda: _cached(cluster).get("status") == "True")
    await cluster.demand()
    await cluster.wait_phase("Ready")
    assert len(cluster.pods()) == 1
    assert cluster.status()["cache"] == {**cluster.status()["cache"], "strategy": "SharedPVC",
                                         "ready": True}  # fmt: skip


async def test_a_failed_prefetch_job_fails_the_model_with_its_reason(cluster: Cluster) -> None:
    api = cluster.api
    api.create("models", _fetched())
    name = await _gated_by(cluster, "prefetch")

    api.set_status("jobs", "default", name, JOB_FAILED)
    await cluster.wait_phase("Failed")
    cached = _cached(cluster)
    assert cached["reason"] == "PrefetchFailed"
    assert name in cached["message"]
    assert "BackoffLimitExceeded" in cached["message"]
    await cluster.demand()
    await eventually(lambda: name in str(cluster.status().get("message")))
    assert cluster.pods() == []


async def test_the_quantize_job_gates_after_the_prefetch(cluster: Cluster) -> None:
    api = cluster.api
    api.create("models", _fetched(quantize={"format": "GGUF"}))
    prefetch = await _gated_by(cluster, "prefetch")

    api.set_status("jobs", "default", prefetch, JOB_COMPLETE)
    quantize = await _gated_by(cluster, "quantize")

    api.set_status("jobs", "default", quantize, JOB_COMPLETE)
    await eventually(lambda: _cached(cluster).get("status") == "True")
    await cluster.demand()
    await cluster.wait_phase("Ready")


def _obj(component: str, status: dict[str, Any], backoff: int = 3) -> dict[str, Any]:
    meta = {"name": f"tiny-{component}", "labels": {COMPONENT_LABEL: component}}
    return {"kind": "Job", "metadata": meta, "spec": {"backoffLimit": backoff}, "status": status}


def test_a_job_state_follows_its_status() -> None:
    assert job_state(_obj("prefetch", {})).status is CacheStatus.PENDING
    assert job_state(_obj("prefetch", {"active": 1})).reason == "PrefetchRunning"
    assert job_state(_obj("prefetch", {"succeeded": 1})).status is CacheStatus.READY
    failed = job_state(_obj("quantize", JOB_FAILED))
    assert (failed.status, failed.reason) == (CacheStatus.FAILED, "QuantizeFailed")
    # A Job controller that has not written the condition yet: the count says it.
    over = job_state(_obj("prefetch", {"failed": 2}, backoff=1))
    assert over.status is CacheStatus.FAILED
    assert "BackoffLimitExceeded" in over.message


def test_the_first_job_not_done_decides() -> None:
    done, running = _obj("prefetch", JOB_COMPLETE), _obj("quantize", {"active": 1})
    assert jobs_state([running, done]).reason == "QuantizeRunning"
    assert jobs_state([done]).status is CacheStatus.READY
    assert jobs_state([]).status is CacheStatus.READY


def _model(source: str = "hf://org/tiny", generation: int = 1) -> Model:
    body = model_body()
    body["spec"]["source"] = source
    body["metadata"]["generation"] = generation
    return Model.model_validate(body)


async def test_the_gate_keeps_its_answer_for_the_same_jobs() -> None:
    running: set[str] = set()
    gate = JobGate(60, lambda key: key in running)
    model = _model()
    assert gate.ensure(model).reason == "PrefetchRunning"  # not read yet
    gate.record(model, [_obj("prefetch", JOB_COMPLETE)])
    # A new generation that renders the same Jobs (serverless settings): still ready.
    assert gate.ensure(_model(generation=2)).status is CacheStatus.READY
    # A new source renders new Jobs: pending until they were read.
    assert gate.ensure(_model("hf://org/other", 3)).status is CacheStatus.PENDING
    # Adopted pods, not read since the start: they keep running until the Jobs are read.
    await gate.release(model.key)
    running.add(model.key)
    assert gate.ensure(model).status is CacheStatus.READY
    assert gate.ensure(_model("file:///m")).status is CacheStatus.READY  # nothing fetched
    await gate.close()


def _failed_at(stamp: datetime) -> dict[str, Any]:
    """JOB_FAILED, with the time the Job controller marked it (seconds, as the apiserver writes)."""
    (failed,) = JOB_FAILED["conditions"]
    condition = {**failed, "lastTransitionTime": stamp.strftime(_RFC3339)}
    return {**JOB_FAILED, "conditions": [condition]}


def _stamp(text: str) -> datetime:
    return datetime.strptime(text, _RFC3339).replace(tzinfo=UTC)


async def test_a_failed_job_is_run_again_after_its_backoff(apiserver: KubeApiServer) -> None:
    """Failed at once, with the retry time; the Job re-created only then, as attempt 2; its
    success makes the Model Ready with no spec change."""
    kube = KubernetesSettings(host=apiserver.url, namespaces=["default"], job_poll_s=0.2,
                              job_retry_initial_s=2.0, job_retry_max_s=60.0)  # fmt: skip
    async with running_cluster(apiserver, kubernetes=kube) as cluster:
        api = cluster.api
        api.create("models", _fetched())
        name = await _gated_by(cluster, "prefetch")
        first = _job(api, "prefetch")
        assert first is not None
        failed = datetime.now(UTC).replace(microsecond=0)
        api.set_status("jobs", "default", name, _failed_at(failed))

        await cluster.wait_phase("Failed")
        generation = (cluster.model() or {})["metadata"]["generation"]
        retry_at = (failed + timedelta(seconds=2)).isoformat(timespec="seconds")
        assert f"attempt 1; run again at {retry_at}" in _cached(cluster)["message"]
        assert _cached(cluster)["reason"] == "PrefetchFailed"
        still = _job(api, "prefetch")  # Failed is reported before anything is re-run
        assert still is not None
        assert still["metadata"]["uid"] == first["metadata"]["uid"]

        def rerun() -> bool:
            job = _job(api, "prefetch")
            return job is not None and job["metadata"]["uid"] != first["metadata"]["uid"]

        await eventually(rerun, 20)
        second = _job(api, "prefetch")
        assert second is not None
        assert second["metadata"]["name"] == name  # the same spec's Job, run afresh
        assert second["metadata"]["annotations"][ATTEMPT_ANNOTATION] == "2"
        assert _stamp(second["metadata"]["creationTimestamp"]) >= failed + timedelta(seconds=2)
        await cluster.wait_phase("Pending")

        api.set_status("jobs", "default", name, JOB_COMPLETE)
        await eventually(lambda: _cached(cluster).get("status") == "True")
        await cluster.demand()
        await cluster.wait_phase("Ready")
        assert (cluster.model() or {})["metadata"]["generation"] == generation  # no spec change


async def test_a_job_its_pod_failure_policy_failed_is_not_run_again() -> None:
    """The quantizer refused the request: Failed with the Job's reason, no retry time, and
    never due, however long the gate waits; only a new spec (new Jobs) changes that."""
    now = [1000.0]
    gate = JobGate(60, lambda key: False, RetryPolicy(10, 1000), clock=lambda: now[0])
    refused = {
        "failed": 1,
        "conditions": [
            {"type": "Failed", "status": "True", "reason": "PodFailurePolicy",
             "message": "Container quantize for pod default/m-quantize-x failed with exit "
                        "code 2 matching FailJob rule at index 1"},
        ],
    }  # fmt: skip
    job = _obj("quantize", refused)
    model = _model()
    gate.record(model, [_obj("prefetch", JOB_COMPLETE), job])
    state = gate.ensure(model)
    assert state.status is CacheStatus.FAILED
    assert state.reason == "QuantizeFailed"
    assert "PodFailurePolicy" in state.message
    assert "fix the spec to retry with a new Job" in state.message
    now[0] = 10**9
    assert gate.retry_due(model, job) is None
    await gate.close()


def test_the_backoff_doubles_up_to_its_cap() -> None:
    policy = RetryPolicy(initial_s=30, max_s=100)
    assert [policy.delay(n) for n in (1, 2, 3, 4)] == [30, 60, 100, 100]


async def test_a_restarted_gate_continues_the_backoff_from_the_job() -> None:
    """A fresh gate (a restarted controller) reads the attempt and failure time off the Job."""
    now = [1000.0]
    gate = JobGate(60, lambda key: False, RetryPolicy(10, 1000), clock=lambda: now[0])
    failed = datetime.fromtimestamp(900, UTC)
    job = _obj("prefetch", _failed_at(failed))
    job["metadata"]["annotations"] = {ATTEMPT_ANNOTATION: "3"}  # 10 s doubled twice: 40 s
    model = _model()
    gate.record(model, [job])
    state = gate.ensure(model)
    assert state.status is CacheStatus.FAILED
    assert "attempt 3; run again at 1970-01-01T00:15:40+00:00" in state.message
    now[0] = 939.0
    assert gate.retry_due(model, job) is None
    now[0] = 940.0
    assert gate.retry_due(model, job) == 4
    await gate.close()


@pytest.mark.parametrize(
    ("cache", "gpu", "strategy"),
    [
        (None, None, "SharedPVC"),
        (None, {"vendor": "nvidia", "shared": "group-a"}, "Memory"),
        ({"strategy": "Local"}, None, "Local"),
        ({"strategy": "None"}, None, "None"),
    ],
)
async def test_the_gate_reports_the_cache_plans_strategy(
    cache: dict[str, Any] | None, gpu: dict[str, Any] | None, strategy: str
) -> None:
    body = model_body()
    body["spec"] |= {"source": "hf://org/tiny"}
    body["spec"] |= {"cache": cache} if cache else {}
    body["spec"] |= {"gpu": gpu} if gpu else {}
    model = Model.model_validate(body)
    gate = JobGate(60, lambda key: False)
    assert gate.ensure(model).strategy == strategy
    gate.record(model, [_obj("prefetch", JOB_COMPLETE)])
    assert gate.ensure(model).strategy == strategy
    await gate.close()
