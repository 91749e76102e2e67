"""The shared fake apiserver: REST semantics, defaults, selectors, watches, test hooks.

Driven with the official ``kubernetes`` client where it has a typed call, and with plain
HTTP where the test needs to see the wire (watch lines, Status bodies).
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.error import HTTPError

import pytest
import urllib3
from kubernetes import client as kube_client
from kubernetes.watch.watch import iter_resp_lines

from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_common.testing.kube_apiserver.http import ApiHttpServer, Handler
from flexinfer_common.testing.kube_apiserver.rest import Request

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))], history_limit=50)
MODELS = "/apis/ai.flexinfer/v1alpha2/namespaces/default/models"


@pytest.fixture
def api(apiserver: KubeApiServer) -> Iterator[kube_client.ApiClient]:
    """The official client on the fake."""
    with kube_client.ApiClient(kube_client.Configuration(host=apiserver.url)) as client:
        yield client


def http(
    server: KubeApiServer,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = "application/json",
) -> tuple[int, Any]:
    """One plain HTTP call: (status, parsed JSON body)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(server.url + path, data=data, method=method)
    request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def watch_lines(
    server: KubeApiServer, path: str, count: int, then: Callable[[], None] | None = None
) -> list[dict[str, Any]]:
    """The first ``count`` events of a watch (``then`` runs once it is open)."""
    with urllib3.PoolManager() as pool:
        stream = pool.request("GET", server.url + path, preload_content=False, timeout=30)
        if then is not None:
            then()  # the headers came: the watch is registered
        try:
            lines = iter_resp_lines(stream)
            return [json.loads(next(lines)) for _ in range(count)]
        finally:
            stream.release_conn()


def model(name: str, **labels: str) -> dict[str, Any]:
    """A Model body."""
    return {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "Model",
        "metadata": {"name": name, "labels": labels},
        "spec": {"backend": "vllm", "source": "hf://o/m", "serverless": {}, "unknown": 1},
    }


def deployment(image: str) -> dict[str, Any]:
    """A minimal Deployment, as a controller would write it."""
    container = {
        "name": "engine",
        "image": image,
        "ports": [{"containerPort": 8000}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}},
    }
    return {
        "metadata": {"name": "engine", "labels": {"app": "engine"}},
        "spec": {
            "selector": {"matchLabels": {"app": "engine"}},
            "template": {
                "metadata": {"labels": {"app": "engine"}},
                "spec": {"containers": [container]},
            },
        },
    }


def test_deployment_gets_the_server_side_defaults(
    apiserver: KubeApiServer, api: kube_client.ApiClient
) -> None:
    apps = kube_client.AppsV1Api(api)
    apps.create_namespaced_deployment("ml", deployment("vllm/vllm-openai"))
    stored = apiserver.get("deployments", "ml", "engine")
    assert stored is not None
    spec = stored["spec"]
    assert (spec["replicas"], spec["revisionHistoryLimit"], spec["progressDeadlineSeconds"]) == (
        1,
        10,
        600,
    )
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
    }
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Always"
    assert pod["dnsPolicy"] == "ClusterFirst"
    assert pod["schedulerName"] == "default-scheduler"
    assert pod["terminationGracePeriodSeconds"] == 30
    assert pod["securityContext"] == {}
    (container,) = pod["containers"]
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["terminationMessagePolicy"] == "File"
    assert container["imagePullPolicy"] == "Always"  # no tag
    assert container["ports"] == [{"containerPort": 8000, "protocol": "TCP"}]
    probe = container["readinessProbe"]
    assert (probe["timeoutSeconds"], probe["periodSeconds"]) == (1, 10)
    assert (probe["successThreshold"], probe["failureThreshold"]) == (1, 3)
    assert stored["metadata"]["generation"] == 1
    read = apps.read_namespaced_deployment("engine", "ml")
    assert read.spec.template.spec.containers[0].image_pull_policy == "Always"


def test_deployment_status_is_set_by_tests_and_spec_bumps_generation(
    apiserver: KubeApiServer, api: kube_client.ApiClient
) -> None:
    apps = kube_client.AppsV1Api(api)
    apps.create_namespaced_deployment("ml", deployment("vllm/vllm-openai:v0.9"))
    stored = apiserver.get("deployments", "ml", "engine")
    assert stored is not None
    assert stored["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    apiserver.set_status("deployments", "ml", "engine", {"readyReplicas": 1, "replicas": 1})
    read = apps.read_namespaced_deployment_status("engine", "ml")
    assert read.status.ready_replicas == 1
    assert read.metadata.generation == 1  # status changes never bump it
    apps.patch_namespaced_deployment(
        "engine", "ml", {"spec": {"replicas": 3}, "status": {"readyReplicas": 0}}
    )
    after = apps.read_namespaced_deployment("engine", "ml")
    assert (after.metadata.generation, after.spec.replicas) == (2, 3)
    assert after.status.ready_replicas == 1  # the main resource ignores status


def test_service_defaults_and_kept_cluster_ip(
    apiserver: KubeApiServer, api: kube_client.ApiClient
) -> None:
    core = kube_client.CoreV1Api(api)
    body: dict[str, Any] = {"metadata": {"name": "engine"}, "spec": {"ports": [{"port": 8000}]}}
    created = core.create_namespaced_service("ml", body)
    assert created.spec.type == "ClusterIP"
    assert created.spec.session_affinity == "None"
    assert (created.spec.ports[0].protocol, created.spec.ports[0].target_port) == ("TCP", 8000)
    ip = created.spec.cluster_ip
    assert ip.startswith("10.96.")
    body["metadata"]["resourceVersion"] = created.metadata.resource_version
    replaced = core.replace_namespaced_service("engine", "ml", body)
    assert replaced.spec.cluster_ip == ip


def test_crd_defaults_pruning_and_validation(apiserver: KubeApiServer) -> None:
    code, created = http(apiserver, "POST", MODELS, model("m"))
    assert code == 201
    assert "unknown" not in created["spec"]  # pruned
    assert created["spec"]["serverless"]["idleTimeout"] == "5m0s"  # schema default
    assert "status" not in created  # status subresource: ignored on create
    invalid = model("bad")
    del invalid["spec"]["backend"]
    code, status = http(apiserver, "POST", MODELS, invalid)
    assert (code, status["reason"]) == (422, "Invalid")
    code, status = http(apiserver, "POST", MODELS, model("m"))
    assert (code, status["reason"]) == (409, "AlreadyExists")


def test_put_preconditions_and_unconditional_updates(apiserver: KubeApiServer) -> None:
    _, created = http(apiserver, "POST", MODELS, model("m"))
    stale = json.loads(json.dumps(created))
    created["spec"]["backend"] = "llamacpp"
    code, updated = http(apiserver, "PUT", f"{MODELS}/m", created)
    assert code == 200
    assert updated["metadata"]["generation"] == 2
    code, status = http(apiserver, "PUT", f"{MODELS}/m", stale)
    assert (code, status["reason"]) == (409, "Conflict")
    del stale["metadata"]["resourceVersion"]
    code, status = http(apiserver, "PUT", f"{MODELS}/m", stale)
    assert code == 422  # custom resources refuse unconditional updates
    assert "must be specified for an update" in status["message"]


def test_status_subresource_ignores_everything_else(apiserver: KubeApiServer) -> None:
    http(apiserver, "POST", MODELS, model("m"))
    patch = {"spec": {"backend": "x"}, "status": {"phase": "Ready"}}
    merge = "application/merge-patch+json"
    code, updated = http(apiserver, "PATCH", f"{MODELS}/m/status", patch, merge)
    assert code == 200
    assert (updated["spec"]["backend"], updated["status"]["phase"]) == ("vllm", "Ready")
    assert updated["metadata"]["generation"] == 1
    before = updated["metadata"]["resourceVersion"]
    _, again = http(apiserver, "PATCH", f"{MODELS}/m/status", patch, merge)
    assert again["metadata"]["resourceVersion"] == before  # a no-op write


def test_label_selectors(apiserver: KubeApiServer) -> None:
    for name, labels in [("a", {"tier": "gpu", "x": "1"}), ("b", {"tier": "cpu"}), ("c", {})]:
        http(apiserver, "POST", MODELS, model(name, **labels))
    cases = {
        "tier=gpu": ["a"],
        "tier==cpu": ["b"],
        "tier!=gpu": ["b", "c"],
        "tier in (gpu,cpu)": ["a", "b"],
        "tier notin (gpu)": ["b", "c"],
        "x": ["a"],
        "!x": ["b", "c"],
        "tier,tier!=cpu": ["a"],
    }
    for selector, names in cases.items():
        query = urllib.parse.quote(selector)
        _, listed = http(apiserver, "GET", f"{MODELS}?labelSelector={query}")
        assert [o["metadata"]["name"] for o in listed["items"]] == names, selector
    code, _ = http(apiserver, "GET", f"{MODELS}?labelSelector=a%20in%20b")
    assert code == 400


def test_finalizers_hold_a_deleted_object(apiserver: KubeApiServer) -> None:
    body = model("m")
    body["metadata"]["finalizers"] = ["flexinfer.ai/model-cleanup"]
    http(apiserver, "POST", MODELS, body)
    code, marked = http(apiserver, "DELETE", f"{MODELS}/m", {"propagationPolicy": "Foreground"})
    assert code == 202
    assert marked["metadata"]["deletionTimestamp"]
    merge = "application/merge-patch+json"
    code, _ = http(
        apiserver, "PATCH", f"{MODELS}/m", {"metadata": {"finalizers": ["a", "b"]}}, merge
    )
    assert code == 422  # no new finalizers while deleting
    code, _ = http(apiserver, "PATCH", f"{MODELS}/m", {"metadata": {"finalizers": None}}, merge)
    assert code == 200
    assert apiserver.get("models", "default", "m") is None
    code, _ = http(apiserver, "DELETE", f"{MODELS}/m")
    assert code == 404


def test_watch_replays_bookmarks_and_answers_410_as_an_error_event(
    apiserver: KubeApiServer,
) -> None:
    _, created = http(apiserver, "POST", MODELS, model("a"))
    start = created["metadata"]["resourceVersion"]
    http(apiserver, "POST", MODELS, model("b", tier="gpu"))
    http(apiserver, "DELETE", f"{MODELS}/a")
    events = watch_lines(apiserver, f"{MODELS}?watch=true&resourceVersion={start}", 2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "b"),
        ("DELETED", "a"),
    ]
    path = f"{MODELS}?watch=1&resourceVersion={apiserver.resource_version}&allowWatchBookmarks=true"
    (bookmark,) = watch_lines(apiserver, path, 1, then=apiserver.bookmark)
    assert bookmark["type"] == "BOOKMARK"
    assert bookmark["object"]["metadata"]["resourceVersion"] == str(apiserver.resource_version)
    apiserver.compact()
    (error,) = watch_lines(apiserver, f"{MODELS}?watch=true&resourceVersion={start}", 1)
    assert error["type"] == "ERROR"
    assert (error["object"]["code"], error["object"]["reason"]) == (410, "Expired")
    (initial,) = watch_lines(apiserver, f"{MODELS}?watch=true", 1)  # no RV: current state
    assert (initial["type"], initial["object"]["metadata"]["name"]) == ("ADDED", "b")


def test_watch_with_a_selector_sees_objects_leave_it(apiserver: KubeApiServer) -> None:
    apiserver.create("configmaps", {"metadata": {"name": "first"}}, "default")
    rv = apiserver.resource_version  # not 0, which would mean "from now"
    http(apiserver, "POST", MODELS, model("a", tier="gpu"))
    apiserver.patch("models", "default", "a", {"metadata": {"labels": {"tier": "cpu"}}})
    path = f"{MODELS}?watch=true&resourceVersion={rv}&labelSelector=tier%3Dgpu"
    events = watch_lines(apiserver, path, 2)
    assert [e["type"] for e in events] == ["ADDED", "DELETED"]


def test_history_window_forces_410(apiserver: KubeApiServer) -> None:
    apiserver.create("configmaps", {"metadata": {"name": "first"}}, "default")
    rv = apiserver.resource_version
    for i in range(51):  # the fixture keeps 50 events
        apiserver.create("configmaps", {"metadata": {"name": f"c{i}"}}, "default")
    (error,) = watch_lines(apiserver, f"{MODELS}?watch=true&resourceVersion={rv}", 1)
    assert error["object"]["code"] == 410


def test_pod_log_secret_and_lease(apiserver: KubeApiServer, api: kube_client.ApiClient) -> None:
    core = kube_client.CoreV1Api(api)
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x:1"}]}}
    core.create_namespaced_pod("ml", pod)
    apiserver.set_pod_log("ml", "p", "one\ntwo\nthree\n")
    # The client turns a text answer into str(bytes) unless asked for the raw response.
    whole = core.read_namespaced_pod_log("p", "ml", _preload_content=False)
    assert whole.data.decode() == "one\ntwo\nthree\n"
    tail = core.read_namespaced_pod_log("p", "ml", tail_lines=1, _preload_content=False)
    assert tail.data.decode() == "three\n"
    secret = core.create_namespaced_secret(
        "ml", {"metadata": {"name": "s"}, "stringData": {"k": "v"}}
    )
    assert (secret.type, secret.data) == ("Opaque", {"k": "dg=="})
    coordination = kube_client.CoordinationV1Api(api)
    lease = {"metadata": {"name": "leader"}, "spec": {"holderIdentity": "a"}}
    coordination.create_namespaced_lease("ml", lease)
    assert coordination.read_namespaced_lease("leader", "ml").spec.holder_identity == "a"


def test_call_log_and_injected_faults(apiserver: KubeApiServer) -> None:
    http(apiserver, "POST", MODELS, model("a"))
    apiserver.inject(500, verb="get", resource="models.ai.flexinfer")
    code, status = http(apiserver, "GET", f"{MODELS}/a")
    assert (code, status["reason"]) == (500, "InternalError")
    code, _ = http(apiserver, "GET", f"{MODELS}/a")
    assert code == 200  # one use only
    http(apiserver, "PATCH", f"{MODELS}/a/status", {"status": {}}, "application/merge-patch+json")
    rbac = {(c.group, c.rbac_resource, c.verb) for c in apiserver.calls}
    assert rbac == {
        ("ai.flexinfer", "models", "create"),
        ("ai.flexinfer", "models", "get"),
        ("ai.flexinfer", "models/status", "patch"),
    }
    assert apiserver.count(verb="get", resource="models") == 2


def test_json_patch_and_unsupported_apply(apiserver: KubeApiServer) -> None:
    http(apiserver, "POST", MODELS, model("a"))
    ops = [{"op": "replace", "path": "/spec/backend", "value": "llamacpp"}]
    code, patched = http(apiserver, "PATCH", f"{MODELS}/a", ops, "application/json-patch+json")
    assert (code, patched["spec"]["backend"]) == (200, "llamacpp")
    code, _ = http(apiserver, "PATCH", f"{MODELS}/a", {}, "application/apply-patch+yaml")
    assert code == 415


def test_a_client_that_hung_up_is_not_reported_but_a_bug_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def serve(request: Request, handler: Handler) -> None:
        raise AssertionError("no request is served here")

    server = ApiHttpServer(serve)
    try:
        for error in (BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "reset")):
            try:
                raise error
            except ConnectionError:
                server.handle_error(None, ("127.0.0.1", 1))
        assert capsys.readouterr().err == ""
        try:
            raise ValueError("a bug in a handler")
        except ValueError:
            server.handle_error(None, ("127.0.0.1", 1))
        assert "ValueError: a bug in a handler" in capsys.readouterr().err
    finally:
        server.server_close()
