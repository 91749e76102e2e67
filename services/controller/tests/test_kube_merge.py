"""The selective merge: API-server defaults never cause an update; each owned field does.

Live objects are the rendered ones as the apiserver returns them: through the shared fake
apiserver (its server-side defaults, over HTTP with the official client), and as a copy
defaulted by hand like a 1.31 apiserver, with what other actors add (labels,
annotations, a restart annotation, status).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as kube_client

from flexinfer_common.testing.kube_apiserver import KubeApiServer
from flexinfer_common.testing.kube_apiserver import defaults as server_defaults
from flexinfer_controller.backends.registry import default_backends
from flexinfer_controller.runtime.kubernetes import render_model
from flexinfer_controller.runtime.kubernetes.merge import (
    Field,
    Mode,
    get,
    merge,
    needs_update,
    owned_fields,
    put,
)
from flexinfer_controller.runtime.kubernetes.options import RenderOptions
from flexinfer_controller.runtime.kubernetes.testing import SAMPLES, Sample

Obj = dict[str, Any]
MERGED_KINDS = ("Deployment", "Service", "ConfigMap", "PodDisruptionBudget")


def rendered(sample: Sample, **changes: Any) -> list[Obj]:
    options = sample.options()
    if changes:
        options = RenderOptions(**{**options.__dict__, **changes})
    return render_model(sample.model(), default_backends(), options)


def by_kind(sample: Sample, kind: str) -> Obj:
    (obj,) = [o for o in rendered(sample) if o["kind"] == kind]
    return obj


def defaulted(obj: Obj) -> Obj:
    """``obj`` as a 1.31 apiserver returns it after others touched it."""
    live = copy.deepcopy(obj)
    meta = live["metadata"]
    meta.update(
        uid="0b6c3f0e-1d2a-4b5c-8d9e-0f1a2b3c4d5e",
        resourceVersion="4242",
        generation=3,
        creationTimestamp="2025-01-01T00:00:00Z",
        managedFields=[{"manager": "flexinfer-controller", "operation": "Update"}],
    )
    meta["labels"]["argocd.argoproj.io/instance"] = "ml-platform"
    meta["annotations"]["deployment.kubernetes.io/revision"] = "3"
    defaulter: dict[str, Callable[[Obj, Obj | None], None]] = {
        "Deployment": server_defaults.deployment, "Service": server_defaults.service,
    }  # fmt: skip
    if (fill := defaulter.get(live["kind"])) is not None:
        fill(live, None)
    if live["kind"] == "Deployment":
        template = live["spec"]["template"]["metadata"]
        template["annotations"]["kubectl.kubernetes.io/restartedAt"] = "2025-01-02T00:00:00Z"
        live["status"] = {"observedGeneration": 3, "replicas": 1, "readyReplicas": 1}
    if live["kind"] == "Service":
        live["status"] = {"loadBalancer": {}}
    return live


def merged_objects() -> Iterator[tuple[str, Obj]]:
    for sample in SAMPLES:
        for obj in rendered(sample):
            if obj["kind"] in MERGED_KINDS:
                yield f"{sample.id}-{obj['kind']}", obj


CASES = list(merged_objects())


@pytest.mark.parametrize(("desired"), [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_a_defaulted_copy_needs_no_update(desired: Obj) -> None:
    live = defaulted(desired)
    assert needs_update(desired, live) == []
    assert merge(desired, live) == {k: v for k, v in live.items() if k != "status"}


def test_the_defaulted_copy_really_differs_from_the_rendered_one() -> None:
    desired = by_kind(SAMPLES[1], "Deployment")
    live = defaulted(desired)
    pod = live["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Always"
    assert pod["schedulerName"] == "default-scheduler"
    assert pod["containers"][0]["terminationMessagePath"] == "/dev/termination-log"
    assert pod["containers"][0]["readinessProbe"]["successThreshold"] == 1
    # The apiserver writes quantities canonically: the merge compares them by value.
    assert pod["containers"][0]["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}
    assert desired["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "0.5",
        "memory": "1024Mi",
    }
    assert live["spec"]["revisionHistoryLimit"] == 10
    assert live != desired


def _changed(value: Any) -> Any:
    """A different value of the same shape (a non-empty one for an empty value)."""
    if value is None or value == {} or value == []:
        return {"changed": True}
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return f"{value}-changed"
    if isinstance(value, list):
        return [*value, {"name": "changed"} if isinstance(value[0], dict) else "changed"]
    if not isinstance(value, dict):
        raise AssertionError(f"unexpected value {value!r}")
    # A key the live copy has beyond the rendered ones would be a default: change a value.
    first = next(iter(value))
    return {**value, first: _changed(value[first])}


def drift(field: Field, live: Obj) -> Obj:
    """``live`` with one owned field changed as another actor (or a stale spec) would."""
    out = copy.deepcopy(live)
    value = get(out, field.path)
    if field.mode is Mode.SHARED:
        first = next(iter(value))
        put(out, field.path, {**value, first: f"{value[first]}-changed"})
    elif field.mode is Mode.NAMES:
        put(out, field.path, [*(value or []), {"name": "sidecar", "image": "busybox"}])
    else:
        put(out, field.path, _changed(value))
    return out


def field_cases() -> Iterator[Any]:
    for sample_index in (1, 2, 8):  # GPU + PDB, flash + node tmpfs, ConfigMap
        for obj in rendered(SAMPLES[sample_index]):
            if obj["kind"] not in MERGED_KINDS:
                continue
            for field in owned_fields(obj):
                if field.mode is Mode.SHARED and not get(obj, field.path):
                    continue
                yield pytest.param(obj, field, id=f"{obj['kind']}-{field.name}")


@pytest.mark.parametrize(("desired", "field"), list(field_cases()))
def test_each_owned_field_is_reported_and_merged_alone(desired: Obj, field: Field) -> None:
    live = defaulted(desired)
    drifted = drift(field, live)
    assert needs_update(desired, drifted) == [field.name]
    merged = merge(desired, drifted)
    assert needs_update(desired, merged) == []
    # Only that field was written: everything else is the live object as it was.
    expected = {k: v for k, v in drifted.items() if k != "status"}
    if field.mode is Mode.SHARED:
        put(expected, field.path, {**get(drifted, field.path), **get(desired, field.path)})
    else:
        put(expected, field.path, get(desired, field.path))
    assert merged == expected


def test_fields_the_controller_does_not_own_are_left_alone() -> None:
    desired = by_kind(SAMPLES[1], "Deployment")
    live = defaulted(desired)
    live["spec"]["revisionHistoryLimit"] = 3
    live["spec"]["progressDeadlineSeconds"] = 120
    live["spec"]["template"]["spec"]["containers"][0]["terminationMessagePolicy"] = (
        "FallbackToLogsOnError"
    )
    live["spec"]["template"]["spec"]["dnsPolicy"] = "Default"
    assert needs_update(desired, live) == []
    service = by_kind(SAMPLES[1], "Service")
    live_service = defaulted(service)
    live_service["spec"]["sessionAffinity"] = "ClientIP"
    assert needs_update(service, live_service) == []


def test_nil_equals_empty() -> None:
    desired = by_kind(SAMPLES[0], "Deployment")
    live = defaulted(desired)
    pod = live["spec"]["template"]["spec"]
    assert "securityContext" not in desired["spec"]["template"]["spec"]
    assert pod["securityContext"] == {}
    pod["tolerations"] = []
    pod["nodeSelector"] = {}
    assert needs_update(desired, live) == []
    pod["nodeSelector"] = {"stale": "entry"}
    assert needs_update(desired, live) == ["spec.template.spec.nodeSelector"]


def test_a_spec_change_is_reported_and_merged() -> None:
    sample = SAMPLES[1]
    (before,) = [o for o in rendered(sample) if o["kind"] == "Deployment"]
    live = defaulted(before)
    env = {"DEFAULT_VLLM_IMAGE": "vllm/vllm-openai:v0.9.2"}
    (after,) = [o for o in rendered(sample, replicas=3, environ=env) if o["kind"] == "Deployment"]
    assert needs_update(after, live) == [
        "spec.replicas",
        "spec.template.spec.containers[engine].image",
    ]
    merged = merge(after, live)
    assert merged["spec"]["replicas"] == 3
    engine = merged["spec"]["template"]["spec"]["containers"][0]
    assert engine["image"] == "vllm/vllm-openai:v0.9.2"
    assert engine["terminationMessagePath"] == "/dev/termination-log"  # defaults kept
    assert merged["metadata"]["resourceVersion"] == "4242"  # the update is conditional


# ------------------------------------------------------------------ through the fake apiserver


@pytest.fixture
def apiserver() -> Iterator[KubeApiServer]:
    with KubeApiServer() as server:
        yield server


def _api(server: KubeApiServer) -> kube_client.ApiClient:
    return kube_client.ApiClient(kube_client.Configuration(host=server.url))


def _read(api: kube_client.ApiClient, obj: Obj) -> Obj:
    meta = obj["metadata"]
    if obj["kind"] == "Deployment":
        response = kube_client.AppsV1Api(api).read_namespaced_deployment(
            meta["name"], meta["namespace"], _preload_content=False
        )
    else:
        response = kube_client.CoreV1Api(api).read_namespaced_service(
            meta["name"], meta["namespace"], _preload_content=False
        )
    found: Obj = json.loads(response.data)
    return found


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.id for s in SAMPLES])
def test_objects_the_apiserver_defaulted_need_no_update(
    apiserver: KubeApiServer, sample: Sample
) -> None:
    api = _api(apiserver)
    try:
        for obj in rendered(sample):
            meta = obj["metadata"]
            if obj["kind"] == "Deployment":
                kube_client.AppsV1Api(api).create_namespaced_deployment(meta["namespace"], obj)
            elif obj["kind"] == "Service":
                kube_client.CoreV1Api(api).create_namespaced_service(meta["namespace"], obj)
            else:
                continue
            live = _read(api, obj)
            assert live != obj, "the apiserver added its defaults"
            assert needs_update(obj, live) == [], obj["kind"]
    finally:
        api.close()


def test_a_merged_update_round_trips_without_a_second_update(apiserver: KubeApiServer) -> None:
    sample = SAMPLES[2]
    (before,) = [o for o in rendered(sample) if o["kind"] == "Deployment"]
    api = _api(apiserver)
    apps = kube_client.AppsV1Api(api)
    try:
        apps.create_namespaced_deployment("ml", before)
        env = {"DEFAULT_VLLM_IMAGE": "vllm/vllm-openai:v0.9.2"}
        (after,) = [o for o in rendered(sample, environ=env) if o["kind"] == "Deployment"]
        live = _read(api, before)
        assert needs_update(after, live) == ["spec.template.spec.containers[engine].image"]
        apps.replace_namespaced_deployment(before["metadata"]["name"], "ml", merge(after, live))
        updated = _read(api, before)
        assert needs_update(after, updated) == []
        assert int(updated["metadata"]["generation"]) == int(live["metadata"]["generation"]) + 1
    finally:
        api.close()


def test_the_plan_creates_updates_or_leaves_alone() -> None:
    from flexinfer_controller.runtime.kubernetes.plan import cleanup, ensure

    objects = rendered(SAMPLES[1])
    for obj in objects:
        created = ensure(obj, None)
        assert created is not None
        assert (created.verb, created.body) == ("create", obj)
        assert ensure(obj, defaulted(obj)) is None
    deployment = by_kind(SAMPLES[1], "Deployment")
    stale = defaulted(deployment)
    stale["spec"]["replicas"] = 0
    update = ensure(deployment, stale)
    assert update is not None
    assert (update.verb, update.fields) == ("update", ("spec.replicas",))
    job = by_kind(SAMPLES[1], "Job")
    assert ensure(job, {**defaulted(job), "spec": {}}) is None  # Jobs are never updated
    deletes = [(op.verb, op.resource) for op in cleanup(objects, [])]
    assert deletes == [
        ("delete", "poddisruptionbudgets"),
        ("delete", "deployments"),
        ("delete", "jobs"),
        ("delete", "services"),
    ]  # the PVC goes with its owner, through the garbage collector


def test_standby_never_changes_replicas_nor_rolls_running_pods() -> None:
    from flexinfer_controller.runtime.kubernetes.plan import standby

    deployment = by_kind(SAMPLES[1], "Deployment")  # rendered with replicas 2
    created = standby(deployment, None)
    assert created is not None
    assert created.verb == "create"
    assert created.body is not None
    assert created.body["spec"]["replicas"] == 0
    running = defaulted(deployment)
    assert standby(deployment, running) is None, "a defaulted replay needs no update"
    running["spec"]["replicas"] = 3
    assert standby(deployment, running) is None, "replicas are start's and stop's"
    relabelled = copy.deepcopy(running)
    relabelled["metadata"]["labels"]["flexinfer.ai/model"] = "old"
    update = standby(deployment, relabelled)
    assert update is not None
    assert update.fields == ("metadata.labels",)
    assert update.body is not None
    assert update.body["spec"]["replicas"] == 3
    retemplated = copy.deepcopy(running)
    retemplated["spec"]["template"]["spec"]["nodeSelector"] = {"disk": "hdd"}
    assert standby(deployment, retemplated) is None, "a new template with pods: start's call"
    retemplated["spec"]["replicas"] = 0
    update = standby(deployment, retemplated)
    assert update is not None
    assert update.fields == ("spec.template.spec.nodeSelector",)
    assert update.body is not None
    assert update.body["spec"]["replicas"] == 0
