"""k8s/: the registry and every admin API are guarded by tokens from Secrets, as rendered.

Every overlay, rendered by the real ``kubectl kustomize``: the registry reads its admin,
P2P and fetch tokens from Secrets, the controller names the Secrets engines and download
Jobs read, no workload holds a token value, and the pods the controller builds from that
configuration read the P2P token (engines) or the fetch token (download Jobs), never an
admin one. The docs' Kubernetes steps run, in
order, against kubectl's client-side dry run (no cluster here): every Secret a workload
references exists before ``kubectl apply -k``, in each namespace that needs it.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from flexinfer_controller.backends.registry import default_backends
from flexinfer_controller.runtime.kubernetes import render_model
from flexinfer_controller.runtime.kubernetes.factory import render_options
from flexinfer_controller.runtime.kubernetes.testing import SAMPLES
from flexinfer_controller.settings import ControllerSettings
from flexinfer_testing.doc_blocks import collect
from flexinfer_testing.kustomize import Obj, by_kind, kubectl, render, selects
from flexinfer_testing.repo import repo_root

ROOT = repo_root()
OVERLAYS = ["base", "overlays/dev", "overlays/prod"]
ADMIN = "flexinfer-admin-token"
REGISTRY_ADMIN = "flexinfer-registry-admin-token"
P2P = "flexinfer-registry-p2p-token"
FETCH = "flexinfer-registry-fetch-token"
TOKENISH = re.compile(r"TOKEN|SECRET|PASSWORD|CREDENTIAL|API_KEY")
SAMPLE = {s.id: s for s in SAMPLES}


@pytest.fixture(params=OVERLAYS)
def rendered(request: pytest.FixtureRequest) -> list[Obj]:
    """One overlay, rendered."""
    return render(ROOT / "k8s" / request.param)


def container(objects: list[Obj], name: str) -> Obj:
    """The first container of Deployment ``name``."""
    found: Obj = by_kind(objects, "Deployment")[name]["spec"]["template"]["spec"]["containers"][0]
    return found


def env_of(item: Obj) -> dict[str, Obj]:
    """A container's variables by name."""
    return {e["name"]: e for e in item.get("env") or []}


def secret_ref(var: Obj) -> tuple[str, str, bool] | None:
    """(Secret, key, optional) of a variable read from a Secret, else None."""
    ref = (var.get("valueFrom") or {}).get("secretKeyRef")
    return None if ref is None else (ref["name"], ref["key"], bool(ref.get("optional")))


def mounted_secret(pod: Obj, item: Obj, path: str) -> tuple[str, bool] | None:
    """(Secret, optional) mounted where ``path`` lies in ``item``, else None."""
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    for mount in item.get("volumeMounts") or []:
        secret = volumes[mount["name"]].get("secret")
        if secret is not None and path.startswith(mount["mountPath"].rstrip("/") + "/"):
            key = path[len(mount["mountPath"].rstrip("/")) + 1 :]
            assert key in {i["path"] for i in secret.get("items") or [{"path": key}]}
            return secret["secretName"], bool(secret.get("optional"))
    return None


def test_the_registry_reads_its_three_tokens_from_secrets(rendered: list[Obj]) -> None:
    registry = container(rendered, "flexinfer-registry")
    pod = by_kind(rendered, "Deployment")["flexinfer-registry"]["spec"]["template"]["spec"]
    env = env_of(registry)
    assert secret_ref(env["FLEXINFER_REGISTRY_AUTH_TOKEN"]) == (REGISTRY_ADMIN, "token", False)
    p2p_file = env["FLEXINFER_REGISTRY_P2P_TOKEN_FILE"]["value"]
    assert mounted_secret(pod, registry, p2p_file) == (P2P, False)
    assert "FLEXINFER_REGISTRY_P2P_TOKEN" not in env
    fetch_file = env["FLEXINFER_REGISTRY_FETCH_TOKEN_FILE"]["value"]
    assert mounted_secret(pod, registry, fetch_file) == (FETCH, False)
    assert "FLEXINFER_REGISTRY_FETCH_TOKEN" not in env
    # The mounted file is readable by the registry's user through fsGroup, by no one else.
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]


def test_the_controller_names_the_secrets_and_holds_no_registry_token(
    rendered: list[Obj],
) -> None:
    env = env_of(container(rendered, "flexinfer-controller"))
    assert env["FLEXINFER_KUBERNETES_REGISTRY_P2P_TOKEN_SECRET"]["value"] == P2P
    assert env["FLEXINFER_KUBERNETES_REGISTRY_FETCH_TOKEN_SECRET"]["value"] == FETCH
    # The kubelet reads the registry's tokens for the pods; the controller never does.
    read = {ref[0] for v in env.values() if (ref := secret_ref(v)) is not None}
    assert not read & {REGISTRY_ADMIN, P2P, FETCH}


def test_no_workload_holds_a_token_value(rendered: list[Obj]) -> None:
    """A token-like variable is read from a Secret, or is a path into a mounted Secret, or
    names a Secret; no rendered Secret carries data; no token string appears at all."""
    assert not by_kind(rendered, "Secret")
    for workload in [o for o in rendered if o["kind"] in ("Deployment", "DaemonSet")]:
        pod = workload["spec"]["template"]["spec"]
        for item in pod["containers"] + pod.get("initContainers", []):
            for name, var in env_of(item).items():
                if not TOKENISH.search(name):
                    continue
                where = f"{workload['metadata']['name']}: {name}"
                if secret_ref(var) is not None:
                    continue
                value = var["value"]
                if name.endswith("_FILE"):
                    assert mounted_secret(pod, item, value) is not None, where
                else:
                    assert name.endswith(("_SECRET", "_SECRET_KEY")), where
                    assert value in (ADMIN, REGISTRY_ADMIN, P2P, FETCH, "token"), where
    text = yaml.safe_dump_all(rendered)
    assert not re.search(r"\b[0-9a-f]{32,}\b", text), "a hex token in the rendered objects"


def test_the_pods_the_controller_builds_read_the_p2p_and_fetch_tokens(
    rendered: list[Obj], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller configured as the overlay configures it renders engines reading
    the P2P Secret, and download Jobs reading the fetch Secret: neither the admin one."""
    for name, var in env_of(container(rendered, "flexinfer-controller")).items():
        if name.startswith("FLEXINFER_KUBERNETES_") and "value" in var:
            monkeypatch.setenv(name, var["value"])
    options = render_options(ControllerSettings())
    engine_sample, fetch_sample = SAMPLE["reference-cpu-file"], SAMPLE["vllm-nvidia-pvc-prefetch"]
    objects = render_model(
        engine_sample.model(), default_backends(), replace(options, gpu=engine_sample.gpu)
    )
    [deployment] = by_kind(objects, "Deployment").values()
    engine = deployment["spec"]["template"]["spec"]["containers"][0]
    assert secret_ref(env_of(engine)["FLEXINFER_ENGINE_REGISTRY_TOKEN"]) == (P2P, "token", False)
    assert REGISTRY_ADMIN not in str(deployment)
    assert ADMIN not in str(deployment)
    objects = render_model(
        fetch_sample.model(), default_backends(), replace(options, gpu=fetch_sample.gpu)
    )
    [job] = by_kind(objects, "Job").values()
    fetcher = job["spec"]["template"]["spec"]["containers"][0]
    assert secret_ref(env_of(fetcher)["FLEXINFER_REGISTRY_AUTH_TOKEN"]) == (FETCH, "token", False)
    assert P2P not in str(job)
    assert REGISTRY_ADMIN not in str(job)


def admits(policy: Obj, namespace: str, labels: dict[str, str], port: str) -> bool:
    """Whether ``policy`` lets a pod with ``labels`` in ``namespace`` reach ``port``."""
    home = policy["metadata"]["namespace"]
    for rule in policy["spec"]["ingress"]:
        if port not in {p["port"] for p in rule.get("ports") or [{"port": port}]}:
            continue
        for peer in rule["from"]:
            ns_selector = peer.get("namespaceSelector")
            ns_labels = {"kubernetes.io/metadata.name": namespace}
            ns_ok = namespace == home if ns_selector is None else selects(ns_selector, ns_labels)
            if ns_ok and selects(peer.get("podSelector") or {}, labels):
                return True
    return False


def test_engines_reach_the_registrys_grpc_port_and_the_engines_policy_is_unchanged(
    rendered: list[Obj],
) -> None:
    policies = by_kind(rendered, "NetworkPolicy")
    assert set(policies) == {"flexinfer-engines", "flexinfer-registry"}
    registry = policies["flexinfer-registry"]
    engine = {"flexinfer.ai/model": "tiny", "flexinfer.ai/component": "engine"}
    assert selects(
        registry["spec"]["podSelector"], {"app.kubernetes.io/name": "flexinfer-registry"}
    )
    assert admits(registry, "ml", engine, "grpc")
    assert not admits(registry, "ml", engine, "http"), "engines need only gRPC"
    assert not admits(registry, "ml", {"app": "other"}, "grpc")
    assert admits(registry, "flexinfer", {"app.kubernetes.io/name": "flexinfer-controller"}, "grpc")
    assert admits(registry, "monitoring", {"app.kubernetes.io/name": "prometheus"}, "http")
    ports = {p["name"] for p in container(rendered, "flexinfer-registry")["ports"]}
    assert {"grpc", "http"} <= ports
    # Engines still admit only the proxy, the controller and Prometheus.
    engines = policies["flexinfer-engines"]
    assert engines["spec"]["policyTypes"] == ["Ingress"]
    for peer, allowed in [
        ({"app.kubernetes.io/name": "flexinfer-proxy"}, True),
        ({"app.kubernetes.io/name": "flexinfer-controller"}, True),
        ({"app.kubernetes.io/name": "flexinfer-registry"}, False),
        (engine, False),
    ]:
        assert admits(engines, "flexinfer", peer, "http") is allowed, peer
    assert "egress" not in registry["spec"]
    assert "egress" not in engines["spec"]


def _k8s_blocks(page: str) -> str:
    """The page's bash blocks that talk to a cluster, in order, as one script."""
    blocks = collect(ROOT, Path(page)).blocks
    found = [b.text for b in blocks if b.lang == "bash" and "kubectl" in b.text and b.skip]
    assert any("apply -k" in text for text in found), page
    return "".join(found)


SHIM = r"""
n=0
kubectl() {
  n=$((n + 1))
  if [ "$1" = apply ] && [ "$2" = -k ]; then
    command kubectl kustomize "$3" > "$WORK/$n.apply.yaml"
  else
    command kubectl "$@" --dry-run=client -o yaml > "$WORK/$n.create.yaml"
  fi
}
"""


def _referenced(objects: list[Obj]) -> set[tuple[str, str, str]]:
    """(namespace, Secret, key) every workload reads."""
    out: set[tuple[str, str, str]] = set()
    for workload in [o for o in objects if o["kind"] in ("Deployment", "DaemonSet")]:
        namespace = workload["metadata"]["namespace"]
        pod = workload["spec"]["template"]["spec"]
        for item in pod["containers"]:
            out |= {(namespace, r[0], r[1]) for v in item.get("env") or [] if (r := secret_ref(v))}
        for volume in pod.get("volumes") or []:
            if (secret := volume.get("secret")) is not None:
                keys = [i["key"] for i in secret.get("items") or []]
                out |= {(namespace, secret["secretName"], k) for k in keys}
    return out


@pytest.mark.parametrize("page", ["docs/security.md", "docs/deploy.md"])
def test_the_docs_steps_create_every_secret_before_it_is_needed(page: str, tmp_path: Path) -> None:
    kubectl()  # skips where kubectl is missing
    script = SHIM + _k8s_blocks(page)
    env = {**os.environ, "WORK": str(tmp_path), "KUBECONFIG": str(tmp_path / "none")}
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    secrets: dict[tuple[str, str], dict[str, str]] = {}
    applied = 0
    steps = sorted(tmp_path.iterdir(), key=lambda p: int(p.name.split(".")[0]))
    for step in steps:
        if step.name.endswith(".create.yaml"):
            obj = yaml.safe_load(step.read_text())
            if obj["kind"] == "Secret":
                data = {k: base64.b64decode(v).decode() for k, v in obj["data"].items()}
                secrets[(obj["metadata"]["namespace"], obj["metadata"]["name"])] = data
            continue
        applied += 1
        objects = [d for d in yaml.safe_load_all(step.read_text()) if d]
        for namespace, name, key in _referenced(objects):
            assert key in secrets.get((namespace, name), {}), f"{page}: {name} before apply"
        controller = env_of(container(objects, "flexinfer-controller"))
        model_secrets = [
            controller["FLEXINFER_KUBERNETES_REGISTRY_P2P_TOKEN_SECRET"]["value"],
            controller["FLEXINFER_KUBERNETES_REGISTRY_FETCH_TOKEN_SECRET"]["value"],
        ]
    assert applied >= 1
    # Each Model namespace gets the same registry tokens the registry has.
    model_namespaces = {ns for ns, _ in secrets} - {"flexinfer"}
    assert model_namespaces, f"{page} creates no Secret in a Model namespace"
    assert FETCH in model_secrets
    for namespace in model_namespaces:
        assert (namespace, REGISTRY_ADMIN) not in secrets, "the registry's admin token stays home"
        for name in model_secrets:
            assert secrets[(namespace, name)] == secrets[("flexinfer", name)], (namespace, name)
    tokens = {
        (n, s["token"]) for (ns, n), s in secrets.items() if ns == "flexinfer" and "token" in s
    }
    assert len({value for _, value in tokens}) == len(tokens), "each token differs"
    assert all(len(value) >= 16 for _, value in tokens)
