"""On Kubernetes, the engine a traced scale-up starts joins the request's trace.

The whole controller (create_app, runtime=kubernetes) on the fake apiserver, whose test
kubelet resolves each new pod's environment as a kubelet does when it creates the
container (ConfigMap keys read then). The pod template never carries the value: a second
replica must not roll the first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_controller.core.activation_trace import SPAN_NAME, ActivationTraces
from flexinfer_controller.runtime.kubernetes.harness import Cluster, model_body, running_cluster
from flexinfer_controller.runtime.kubernetes.pods import TEMPLATE_HASH_ANNOTATION
from flexinfer_controller.testing import eventually
from flexinfer_testing.traces import recording_provider, wait_for_spans

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
REQUEST_SPAN = "00f067aa0ba902b7"


@pytest.fixture
async def traced(apiserver: KubeApiServer) -> AsyncIterator[tuple[Cluster, InMemorySpanExporter]]:
    """A running cluster whose controller records its scale-up spans."""
    provider, exporter = recording_provider()
    activations = ActivationTraces(provider.get_tracer("test"))
    async with running_cluster(apiserver, activations) as cluster:
        yield cluster, exporter


def template_hash(obj: dict[str, Any]) -> str:
    """The template hash a pod or a Deployment's template carries."""
    meta = obj["spec"]["template"]["metadata"] if obj["kind"] == "Deployment" else obj["metadata"]
    return str(meta["annotations"][TEMPLATE_HASH_ANNOTATION])


def engine_env(cluster: Cluster, pod: dict[str, Any]) -> dict[str, str]:
    """What the pod's engine was started with."""
    return cluster.kubelet.environments[pod["metadata"]["name"]]


async def test_a_cold_start_hands_the_scale_up_span_to_the_engine_pod(
    traced: tuple[Cluster, InMemorySpanExporter],
) -> None:
    cluster, exporter = traced
    api = cluster.api
    api.create("models", model_body())
    await cluster.wait_phase("Idle")
    before = len(api.calls)
    await cluster.demand(traceparent=f"00-{TRACE_ID}-{REQUEST_SPAN}-01")
    await cluster.wait_phase("Ready")
    # The traceparent is written before the replicas rise, so no pod can start without it.
    calls = [(c.verb, c.resource) for c in api.calls[before:]]
    writes = ("create", "update", "patch")
    scaled = next(
        i for i, (verb, kind) in enumerate(calls) if kind == "deployments" and verb in writes
    )
    assert calls.index(("create", "configmaps")) < scaled
    [span] = wait_for_spans(exporter, SPAN_NAME)
    assert format(span.context.trace_id, "032x") == TRACE_ID
    scale_up = f"00-{TRACE_ID}-{format(span.context.span_id, '016x')}-01"

    [first] = cluster.pods()
    # The engine's weight loading becomes a child of the scale-up span.
    assert engine_env(cluster, first)["TRACEPARENT"] == scale_up
    deployment = api.get("deployments", "default", "tiny")
    assert deployment is not None
    assert scale_up not in str(deployment), "the template never carries the value"
    digest = template_hash(deployment)
    assert template_hash(first) == digest

    # 1 -> 2, untraced: the running pod is kept (same template), the new one joins no trace.
    updates = api.count("update", "deployments") + api.count("patch", "deployments")
    api.patch(
        "models", "default", "tiny", {"spec": {"serverless": {"minReplicas": 2, "maxReplicas": 2}}}
    )
    await eventually(lambda: len(cluster.pods()) == 2, timeout_s=15)
    deployment = api.get("deployments", "default", "tiny")
    assert deployment is not None
    assert template_hash(deployment) == digest
    assert deployment["spec"]["replicas"] == 2
    assert api.count("update", "deployments") + api.count("patch", "deployments") > updates
    pods = {p["metadata"]["name"]: p for p in cluster.pods()}
    assert first["metadata"]["name"] in pods, "the running replica was not rolled"
    assert pods[first["metadata"]["name"]]["metadata"]["uid"] == first["metadata"]["uid"]
    [second] = [p for name, p in pods.items() if name != first["metadata"]["name"]]
    assert template_hash(second) == digest
    assert "TRACEPARENT" not in engine_env(cluster, second), "no stale parent for an untraced start"


async def test_deleting_the_model_deletes_its_trace_config_map(
    traced: tuple[Cluster, InMemorySpanExporter],
) -> None:
    cluster, _ = traced
    api = cluster.api
    api.create("models", model_body())
    await cluster.wait_phase("Idle")
    await cluster.demand(traceparent=f"00-{TRACE_ID}-{REQUEST_SPAN}-01")
    await cluster.wait_phase("Ready")
    assert api.get("configmaps", "default", "tiny-trace") is not None
    api.delete("models", "default", "tiny")
    await eventually(lambda: cluster.model() is None, timeout_s=15)
    assert api.get("configmaps", "default", "tiny-trace") is None
