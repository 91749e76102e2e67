"""Deployment files: k8s manifests (k8s/base) and the Taskfile.

compose.yaml, the Dockerfiles, Prometheus and Grafana are checked in tests/deploy, which
also renders every k8s overlay.

There is no Docker engine or kube-apiserver here, so these are schema checks (the official
Kubernetes schemas from kubernetes-validate, the compose-spec and Taskfile schemas vendored
by check-jsonschema) plus the cross-references a schema cannot see.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from flexinfer_common.crd import render_crds
from flexinfer_testing.repo import repo_root

ROOT = repo_root()
# Overlays hold partial objects (strategic-merge patches): tests/deploy/test_deploy_k8s.py
# validates what they render to.
K8S_FILES = sorted(
    p for p in (ROOT / "k8s").rglob("*.yaml") if "overlays" not in p.relative_to(ROOT).parts
)
SERVICE_PORTS = {
    "proxy": [8080],
    "controller": [8090],
    "scheduler": [8888],
    "registry": [8011, 8001],
    "agent": [9100],
    "engine": [8000],
}
# Custom kinds have no schema in kubernetes-validate; test_common_crd validates them.
CUSTOM_KINDS = {
    "Model",
    "LoRAAdapter",
    "ModelCatalog",
    "ModelDeployment",
    "ModelCache",
    "GPUGroup",
    "Kustomization",
    "Component",
    # The Prometheus Operator's (k8s/components/servicemonitors): tests/deploy checks them.
    "ServiceMonitor",
    "PodMonitor",
}


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]


def _vendored_schema(name: str) -> dict[str, Any]:
    text = (resources.files("check_jsonschema.builtin_schemas.vendor") / name).read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def _kustomized_files(directory: Path) -> list[Path]:
    """The files a kustomization lists, with the kustomization directories it includes expanded."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    files: list[Path] = []
    for resource in kustomization["resources"]:
        path = (directory / resource).resolve()
        files += _kustomized_files(path) if path.is_dir() else [path]
    return files


def _base_objects() -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for path in _kustomized_files(ROOT / "k8s/base"):
        objects += _docs(path)
    return objects


# ---------------------------------------------------------------------------- Kubernetes


def test_k8s_has_the_layout() -> None:
    names = {str(p.relative_to(ROOT / "k8s")) for p in K8S_FILES}
    assert {
        "crds/ai.flexinfer_models.yaml",
        "crds/ai.flexinfer_loraadapters.yaml",
        "base/kustomization.yaml",
    } <= names
    assert {"examples/model-tiny.yaml", "examples/model-llama-vllm.yaml"} <= names


@pytest.mark.parametrize("path", K8S_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_k8s_yaml_is_valid(path: Path) -> None:
    docs = _docs(path)
    assert docs, f"{path} has no documents"
    for doc in docs:
        assert isinstance(doc, dict)
        assert doc.get("apiVersion"), f"{path}: apiVersion missing"
        assert doc.get("kind"), f"{path}: kind missing"
        # Tool configurations, not API objects (no metadata); the scheduler's own test checks
        # the KubeSchedulerConfiguration's field names.
        if doc["kind"] in ("Kustomization", "Component", "KubeSchedulerConfiguration"):
            continue
        assert doc.get("metadata", {}).get("name"), f"{path}: metadata.name missing"
        if doc["kind"] not in CUSTOM_KINDS:
            version = kubernetes_validate.latest_version()
            kubernetes_validate.validate(doc, version, strict=True)


def test_kubernetes_validate_catches_mistakes() -> None:
    # The check above can fail: a wrong type in a Deployment is rejected.
    (deployment,) = [d for d in _docs(ROOT / "k8s/base/proxy.yaml") if d["kind"] == "Deployment"]
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, kubernetes_validate.latest_version(), strict=True)


def test_kustomization_resources_exist_and_images_are_named() -> None:
    kustomization = yaml.safe_load((ROOT / "k8s/base/kustomization.yaml").read_text())
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["namespace"] == "flexinfer"
    for path in _kustomized_files(ROOT / "k8s/base"):
        assert path.is_file(), path
    images = {i["name"] for i in kustomization["images"]}
    for obj in _base_objects():
        if obj["kind"] in ("Deployment", "DaemonSet"):
            for container in obj["spec"]["template"]["spec"]["containers"]:
                assert container["image"] in images, container["image"]


def test_crd_kustomization_lists_every_crd() -> None:
    # k8s/base takes the CRDs through k8s/crds/kustomization.yaml: a CRD file there
    # (generated by `flexinfer crd generate` or the registry's own) that the list misses
    # would never be applied.
    kustomization = yaml.safe_load((ROOT / "k8s/crds/kustomization.yaml").read_text())
    files = {p.name for p in (ROOT / "k8s/crds").glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(files)
    assert set(render_crds()) <= files


def test_workloads_probe_health_and_reference_what_exists() -> None:
    objects = _base_objects()
    by_kind: dict[str, set[str]] = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], set()).add(obj["metadata"]["name"])
    assert by_kind["Namespace"] == {"flexinfer"}
    assert by_kind["DaemonSet"] == {"flexinfer-agent"}
    deployments = {n.removeprefix("flexinfer-") for n in by_kind["Deployment"]}
    assert deployments == {"proxy", "controller", "scheduler", "registry"}
    for obj in objects:
        if obj["kind"] not in ("Deployment", "DaemonSet"):
            continue
        pod = obj["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] in by_kind["ServiceAccount"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        svc = obj["metadata"]["name"].removeprefix("flexinfer-")
        (container,) = pod["containers"]
        ports = [p["containerPort"] for p in container["ports"]]
        assert ports == SERVICE_PORTS[svc], svc
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": ports[0]}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": ports[0]}
        for source in container["envFrom"]:
            assert source["configMapRef"]["name"] in by_kind["ConfigMap"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env[f"FLEXINFER_{svc.upper()}_HOST"] == "0.0.0.0"


def test_services_select_their_pods() -> None:
    objects = _base_objects()
    workloads = {
        o["metadata"]["name"]: o for o in objects if o["kind"] in ("Deployment", "DaemonSet")
    }
    services = [o for o in objects if o["kind"] == "Service"]
    assert {s["metadata"]["name"] for s in services} == {
        "flexinfer-proxy",
        "flexinfer-controller",
        "flexinfer-scheduler",
        "flexinfer-registry",
    }
    for service in services:
        workload = workloads[service["metadata"]["name"]]
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items()
        named = {p["name"] for p in workload["spec"]["template"]["spec"]["containers"][0]["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= named


def test_configmap_points_at_redis_and_postgres() -> None:
    (config,) = [o for o in _base_objects() if o["kind"] == "ConfigMap"]
    data = config["data"]
    assert data["FLEXINFER_BUS_URL"] == "redis://redis:6379/0"
    assert data["FLEXINFER_STORE_URL"] == "postgresql+psycopg://postgres@postgres:5432/flexinfer"
    assert all(key.startswith("FLEXINFER_") for key in data)


def test_controller_role_covers_what_it_reconciles() -> None:
    (role,) = [
        o
        for o in _base_objects()
        if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "flexinfer-controller"
    ]
    granted = {
        (group, resource): set(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    # Least privilege: services/controller/tests/test_kube_rbac.py checks the role grants
    # exactly the verbs the controller's code uses; here only the essentials.
    assert {"get", "list", "watch", "create", "patch", "delete"} <= granted[
        ("ai.flexinfer", "models")
    ]
    for key in [("apps", "deployments"), ("", "services")]:
        assert {"get", "create", "update", "delete"} <= granted[key], key
    assert "patch" in granted[("ai.flexinfer", "models/status")]
    assert "patch" in granted[("", "configmaps")]  # endpoint records
    (binding,) = [
        o
        for o in _base_objects()
        if o["kind"] == "ClusterRoleBinding" and o["metadata"]["name"] == "flexinfer-controller"
    ]
    assert binding["subjects"][0]["name"] == "flexinfer-controller"


# ---------------------------------------------------------------------------- Taskfile


def test_taskfile_mirrors_dev() -> None:
    taskfile = yaml.safe_load((ROOT / "Taskfile.yml").read_text())
    schema = _vendored_schema("taskfile.json")
    jsonschema.validators.validator_for(schema)(schema).validate(taskfile)
    dev = (ROOT / "dev").read_text()
    commands = set(re.findall(r"^  (\w+)\)", dev, re.MULTILINE))
    assert {"setup", "up", "test", "lint", "fmt", "crds", "bench"} <= commands
    for command in commands:
        assert command in taskfile["tasks"], f"Taskfile lacks `{command}`"
        assert any(f"./dev {command}" in c for c in taskfile["tasks"][command]["cmds"])


# ---------------------------------------------------------------------------- network policy

ENGINE_POD_LABELS = {"flexinfer.ai/model": "tiny", "flexinfer.ai/backend": "vllm"}
"""What the controller labels engine pods with (reference: workload labels)."""


def _rendered_base() -> list[dict[str, Any]]:
    """``kubectl kustomize k8s/base``, as ``kubectl apply -k k8s/base`` sends it.

    kubectl's default load restrictor applies, as it does to ``apply -k``, which has no flag
    to lift it: the base must take the CRDs through their own kustomization (../crds).
    """
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: the kustomize rendering cannot be checked")
    result = subprocess.run(
        [kubectl, "kustomize", str(ROOT / "k8s/base")],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d is not None]


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a metav1.LabelSelector matches ``labels`` (an empty selector matches all)."""
    if not all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        present = key in labels
        ok = {
            "Exists": present,
            "DoesNotExist": not present,
            "In": present and labels[key] in values,
            "NotIn": not present or labels[key] not in values,
        }[op]
        if not ok:
            return False
    return True


def _pod_labels(objects: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Pod template labels of every workload, by component (proxy, controller, ...)."""
    return {
        o["metadata"]["name"].removeprefix("flexinfer-"): o["spec"]["template"]["metadata"][
            "labels"
        ]
        for o in objects
        if o["kind"] in ("Deployment", "DaemonSet")
    }


def _peer_admits(peer: dict[str, Any], namespace: str, labels: dict[str, str]) -> bool:
    """Whether one NetworkPolicyPeer admits a pod (``namespace``'s automatic name label)."""
    assert "ipBlock" not in peer, "engines admit no address ranges"
    ns_labels = {"kubernetes.io/metadata.name": namespace}
    if "namespaceSelector" in peer and not _selects(peer["namespaceSelector"], ns_labels):
        return False
    if "namespaceSelector" not in peer and namespace != "flexinfer":
        return False  # a bare podSelector means the policy's own namespace
    return _selects(peer.get("podSelector", {}), labels)


def test_kustomize_renders_a_valid_base() -> None:
    objects = _rendered_base()
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "DaemonSet", "NetworkPolicy", "CustomResourceDefinition"} <= kinds
    for obj in objects:
        assert obj["metadata"].get("namespace", "flexinfer") == "flexinfer" or obj["kind"] in (
            "Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
        ), obj["metadata"]  # fmt: skip
        if obj["kind"] != "CustomResourceDefinition":
            kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)


def test_engines_admit_only_the_proxy_the_controller_and_prometheus() -> None:
    objects = _rendered_base()
    # The engines' policy (the registry has its own: tests/deploy/test_deploy_k8s_tokens.py).
    (policy,) = [
        o
        for o in objects
        if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "flexinfer-engines"
    ]
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    pods = _pod_labels(objects)
    assert _selects(spec["podSelector"], ENGINE_POD_LABELS), "the policy covers engine pods"
    for component, labels in pods.items():
        assert not _selects(spec["podSelector"], labels), f"{component} is not an engine"
    peers = [peer for rule in spec["ingress"] for peer in rule["from"]]
    assert all(rule.get("from") for rule in spec["ingress"]), "an empty `from` admits everyone"

    def admitted(namespace: str, labels: dict[str, str]) -> bool:
        return any(_peer_admits(peer, namespace, labels) for peer in peers)

    assert admitted("flexinfer", pods["proxy"])
    assert admitted("flexinfer", pods["controller"])
    assert admitted("monitoring", {"app.kubernetes.io/name": "prometheus"})
    for component in ("scheduler", "registry", "agent"):
        assert not admitted("flexinfer", pods[component]), component
    assert not admitted("flexinfer", ENGINE_POD_LABELS), "engines do not call each other"
    assert not admitted("team-a", pods["proxy"]), "a look-alike proxy elsewhere is refused"
    assert not admitted("team-a", {"app": "anything"})
    # The policy must also work copied into a Model's namespace: it names flexinfer itself.
    for peer in peers:
        assert "namespaceSelector" in peer


def test_admin_token_secret_is_mounted_where_the_settings_read_it() -> None:
    objects = _rendered_base()
    for obj in objects:
        if obj["kind"] not in ("Deployment", "DaemonSet"):
            continue
        svc = obj["metadata"]["name"].removeprefix("flexinfer-")
        if svc not in ("controller", "scheduler", "agent"):
            continue
        pod = obj["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        token_file = Path(env[f"FLEXINFER_{svc.upper()}_AUTH_TOKEN_FILE"])
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        (name,) = [n for n, m in mounts.items() if token_file.parent == Path(m["mountPath"])]
        assert mounts[name]["readOnly"] is True
        secret = volumes[name]["secret"]
        assert secret["secretName"] == "flexinfer-admin-token"
        assert secret.get("optional", False) is False, "no Secret, no start: never an open API"
        assert {"key": "token", "path": token_file.name} in secret["items"]
        assert secret["defaultMode"] & 0o007 == 0, "not world-readable"
        assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]
        assert f"FLEXINFER_{svc.upper()}_ALLOW_UNAUTHENTICATED" not in env
