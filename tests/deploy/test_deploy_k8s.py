"""k8s/: every overlay, rendered by the real ``kubectl kustomize``, is valid Kubernetes.

There is no kube-apiserver here, so "valid" means: each rendered object passes
kubernetes-validate (the official OpenAPI schemas, strict: unknown fields fail) for the
newest Kubernetes version it ships, and the references a schema cannot see hold (a Service
selects its pods, a budget its workload, a monitor a named port, a binding an existing
account). The Prometheus Operator's kinds have no schema there; their cross-references
are checked instead.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from flexinfer_controller.backends.registry import backend_factories
from flexinfer_controller.runtime.kubernetes.engine import PORT_NAME
from flexinfer_testing.kustomize import Obj, by_kind, render, render_with_components, selects
from flexinfer_testing.repo import repo_root

ROOT = repo_root()
K8S = ROOT / "k8s"
OVERLAYS = ["base", "overlays/dev", "overlays/prod"]
MONITORS = K8S / "components/servicemonitors"
COMPONENTS = ("proxy", "controller", "scheduler", "registry")
OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor"}
VERSION = kubernetes_validate.latest_version()


def _variant(name: str, tmp_path: Path) -> list[Obj]:
    """An overlay, or ``OVERLAY+monitors``: the overlay with the ServiceMonitors component."""
    overlay, _, component = name.partition("+")
    if not component:
        return render(K8S / overlay)
    return render_with_components(tmp_path, K8S / overlay, [MONITORS])


VARIANTS = [*OVERLAYS, "overlays/dev+monitors", "overlays/prod+monitors"]


@pytest.fixture(params=VARIANTS)
def rendered(request: pytest.FixtureRequest, tmp_path: Path) -> list[Obj]:
    """One rendered variant."""
    name: str = request.param
    return _variant(name, tmp_path)


def _workloads(objects: list[Obj]) -> list[Obj]:
    return [o for o in objects if o["kind"] in ("Deployment", "DaemonSet")]


def test_every_rendered_object_passes_kubernetes_validate(rendered: list[Obj]) -> None:
    assert len(rendered) > 30
    for obj in rendered:
        if obj["kind"] in OPERATOR_KINDS:
            assert obj["apiVersion"] == "monitoring.coreos.com/v1"
            continue
        kubernetes_validate.validate(obj, VERSION, strict=True)


def test_the_validation_rejects_a_broken_object() -> None:
    (pdb, *_) = by_kind(render(K8S / "base"), "PodDisruptionBudget").values()
    pdb["spec"]["minAvailble"] = 1  # a typo: strict validation refuses unknown fields
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pdb, VERSION, strict=True)


def test_the_topology_is_complete(rendered: list[Obj]) -> None:
    assert set(by_kind(rendered, "Namespace")) == {"flexinfer"}
    names = {f"flexinfer-{c}" for c in COMPONENTS}
    assert names <= set(by_kind(rendered, "Deployment"))
    assert names <= set(by_kind(rendered, "Service"))
    assert set(by_kind(rendered, "DaemonSet")) == {"flexinfer-agent"}
    assert names <= set(by_kind(rendered, "PodDisruptionBudget"))
    crds = {
        o["spec"]["names"]["kind"] for o in by_kind(rendered, "CustomResourceDefinition").values()
    }
    assert {"Model", "LoRAAdapter", "ModelCatalog", "GPUGroup"} <= crds
    assert {"flexinfer-config", "flexinfer-kube-scheduler-config"} <= set(
        by_kind(rendered, "ConfigMap")
    )


def test_containers_are_bounded_probed_and_locked_down(rendered: list[Obj]) -> None:
    accounts = set(by_kind(rendered, "ServiceAccount"))
    for workload in _workloads(rendered):
        name = workload["metadata"]["name"]
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        if name.startswith("flexinfer-"):
            assert pod["serviceAccountName"] in accounts, name
        else:  # dev's Redis and PostgreSQL call no API
            assert pod["automountServiceAccountToken"] is False, name
        for container in pod["containers"]:
            assert {"cpu", "memory"} <= set(container["resources"]["requests"]), name
            assert "memory" in container["resources"]["limits"], name
            assert container["livenessProbe"], name
            assert container["readinessProbe"], name
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["capabilities"]["drop"] == ["ALL"], name
            assert ":" in container["image"], f"{name}: the image tag is set by the overlay"


def test_services_and_budgets_select_their_pods(rendered: list[Obj]) -> None:
    pods = {w["metadata"]["name"]: w for w in _workloads(rendered)}

    def matching(selector: Obj) -> list[str]:
        return [
            n
            for n, w in pods.items()
            if selects(selector, w["spec"]["template"]["metadata"]["labels"])
        ]

    for service in by_kind(rendered, "Service").values():
        (target,) = matching({"matchLabels": service["spec"]["selector"]})
        container_ports = {
            p["name"]
            for c in pods[target]["spec"]["template"]["spec"]["containers"]
            for p in c["ports"]
        }
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= container_ports
    for name, pdb in by_kind(rendered, "PodDisruptionBudget").items():
        (target,) = matching(pdb["spec"]["selector"])
        replicas = pods[target]["spec"].get("replicas", 1)
        # A budget that no eviction can satisfy blocks every node drain.
        allowed = pdb["spec"].get("maxUnavailable", replicas - pdb["spec"].get("minAvailable", 0))
        assert allowed >= 1, f"{name} lets no pod of {replicas} go"


def test_each_service_account_has_only_its_own_role(rendered: list[Obj]) -> None:
    bindings = [o for o in rendered if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    roles = {(o["kind"], o["metadata"]["name"]): o for o in rendered if o["kind"].endswith("Role")}
    bound: dict[str, list[str]] = {}
    for binding in bindings:
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount"
            assert subject["namespace"] == "flexinfer"
            bound.setdefault(subject["name"], []).append(role["metadata"]["name"])
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], f"{role['metadata']['name']}: wildcard {field}"
            if "secrets" in rule["resources"]:
                assert set(rule["verbs"]) <= {"get"}, "secrets are read by name, never listed"
    assert bound == {f"flexinfer-{c}": [f"flexinfer-{c}"] for c in (*COMPONENTS, "agent")}


def test_the_scheduler_extender_configuration_names_the_scheduler_service() -> None:
    objects = render(K8S / "base")
    config = by_kind(objects, "ConfigMap")["flexinfer-kube-scheduler-config"]
    shipped = (K8S / "scheduler/kube-scheduler-config.yaml").read_text(encoding="utf-8")
    assert config["data"]["config.yaml"] == shipped
    (extender,) = yaml.safe_load(shipped)["extenders"]
    service = by_kind(objects, "Service")["flexinfer-scheduler"]
    host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc.cluster.local"
    assert extender["urlPrefix"] == f"http://{host}:{service['spec']['ports'][0]['port']}"


def test_dev_brings_the_backing_services_the_config_points_at() -> None:
    objects = render(K8S / "overlays/dev")
    data = by_kind(objects, "ConfigMap")["flexinfer-config"]["data"]
    services = by_kind(objects, "Service")
    for url, name in (
        (data["FLEXINFER_BUS_URL"], "redis"),
        (data["FLEXINFER_STORE_URL"], "postgres"),
    ):
        port = services[name]["spec"]["ports"][0]["port"]
        assert f"@{name}:{port}/" in url or f"//{name}:{port}/" in url
    assert data["FLEXINFER_LOG_JSON_FORMAT"] == "false"
    assert by_kind(objects, "Deployment")["flexinfer-proxy"]["spec"]["replicas"] == 1


def test_prod_reads_the_store_url_from_a_secret_only() -> None:
    objects = render(K8S / "overlays/prod")
    assert "FLEXINFER_STORE_URL" not in by_kind(objects, "ConfigMap")["flexinfer-config"]["data"]
    for workload in _workloads(objects):
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e for e in container["env"]}
        ref = env["FLEXINFER_STORE_URL"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": "flexinfer-store", "key": "url"}, workload["metadata"]["name"]
    proxy = by_kind(objects, "Deployment")["flexinfer-proxy"]
    assert proxy["spec"]["replicas"] >= 3
    spread = proxy["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in spread} == {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    }


def test_monitors_scrape_named_ports_that_exist(tmp_path: Path) -> None:
    objects = render_with_components(tmp_path, K8S / "overlays/prod", [MONITORS])
    services = by_kind(objects, "Service")
    pods = {w["metadata"]["name"]: w["spec"]["template"] for w in _workloads(objects)}
    monitors = by_kind(objects, "ServiceMonitor")
    assert set(monitors) == {f"flexinfer-{c}" for c in COMPONENTS}
    for monitor in monitors.values():
        (service,) = [
            s
            for s in services.values()
            if selects(monitor["spec"]["selector"], s["metadata"]["labels"])
        ]
        ports = {p["name"] for p in service["spec"]["ports"]}
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
    pod_monitors = by_kind(objects, "PodMonitor")
    agent = pod_monitors["flexinfer-agent"]
    (agent_pod,) = [
        t for t in pods.values() if selects(agent["spec"]["selector"], t["metadata"]["labels"])
    ]
    agent_ports = {p["name"] for c in agent_pod["spec"]["containers"] for p in c["ports"]}
    assert {e["port"] for e in agent["spec"]["podMetricsEndpoints"]} <= agent_ports
    # Engine pods are the controller's: the port name is the one its renderer gives them.
    engines = pod_monitors["flexinfer-engines"]
    assert selects(engines["spec"]["selector"], {"flexinfer.ai/model": "tiny"})
    assert [e["port"] for e in engines["spec"]["podMetricsEndpoints"]] == [PORT_NAME]
    assert not any(
        selects(engines["spec"]["selector"], t["metadata"]["labels"]) for t in pods.values()
    )


# ---------------------------------------------------------------------------- examples


def _examples() -> list[tuple[Path, Obj]]:
    return [
        (path, doc)
        for path in sorted((K8S / "examples").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if doc is not None
    ]


def test_there_is_a_model_example_for_every_backend() -> None:
    backends = {doc["spec"]["backend"] for _, doc in _examples() if doc["kind"] == "Model"}
    assert backends == set(backend_factories())


@functools.cache
def _rendered_crds() -> dict[tuple[str, str], Obj]:
    """The CRDs k8s/base applies, by (group, kind): rendered once, never changed."""
    return {
        (o["spec"]["group"], o["spec"]["names"]["kind"]): o
        for o in by_kind(render(K8S / "base"), "CustomResourceDefinition").values()
    }


@pytest.mark.parametrize("index", range(len(_examples())), ids=lambda i: _examples()[i][0].name)
def test_example_validates_against_the_rendered_crd(index: int) -> None:
    _, doc = _examples()[index]
    crds = _rendered_crds()
    group, version = doc["apiVersion"].split("/")
    crd = crds[(group, doc["kind"])]
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    assert served["served"] is True
    schema: dict[str, Any] = served["schema"]["openAPIV3Schema"]
    jsonschema.Draft7Validator(schema).validate(doc)
    kubernetes_validate.validate(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc["metadata"]}, VERSION, strict=True
    )  # the example's metadata is valid ObjectMeta
