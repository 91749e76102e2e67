"""The agent's DaemonSet and RBAC in k8s/base: valid, and granting only what it uses.

``libs/common/tests/test_common_deploy.py`` validates every file of the kustomization; this
checks, as rendered by ``kubectl kustomize``, what the agent needs from them.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def rendered() -> dict[tuple[str, str], dict[str, Any]]:
    """The agent's objects from ``kubectl kustomize k8s/base``, by (kind, name)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: the kustomize rendering cannot be checked")
    out = subprocess.run(
        [kubectl, "kustomize", str(ROOT / "k8s/base")], check=True, capture_output=True, text=True
    ).stdout
    docs = [doc for doc in yaml.safe_load_all(out) if doc]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs if "agent" in d["metadata"]["name"]}


def test_the_objects_are_valid_kubernetes(rendered: dict[tuple[str, str], Any]) -> None:
    assert set(rendered) == {
        ("DaemonSet", "flexinfer-agent"),
        ("ServiceAccount", "flexinfer-agent"),
        ("ClusterRole", "flexinfer-agent"),
        ("ClusterRoleBinding", "flexinfer-agent"),
    }
    for doc in rendered.values():
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_rbac_is_get_and_patch_of_nodes(rendered: dict[tuple[str, str], Any]) -> None:
    role = rendered["ClusterRole", "flexinfer-agent"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
    binding = rendered["ClusterRoleBinding", "flexinfer-agent"]
    assert binding["roleRef"]["name"] == "flexinfer-agent"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "flexinfer-agent", "namespace": "flexinfer"}
    ]


def test_the_daemonset_runs_everywhere_and_knows_its_node(
    rendered: dict[tuple[str, str], Any],
) -> None:
    pod = rendered["DaemonSet", "flexinfer-agent"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "flexinfer-agent"
    assert {"operator": "Exists"} in pod["tolerations"]  # tainted GPU nodes too
    [container] = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["FLEXINFER_AGENT_REPORT"]["value"] == "kubernetes"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
