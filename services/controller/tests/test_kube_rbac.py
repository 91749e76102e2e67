"""RBAC least privilege: the controller's ClusterRole grants exactly the verbs the code uses.

The verbs are derived from the code, not listed again: the kubernetes client methods the
adapters call (scanned from their source; a file that declares its own custom ``Resource``
calls custom-object methods on that one only; a ``CoreListWatch`` lists and watches the core
kind it names), the API calls the kubernetes runtime's plan
makes for every rendered object, the owner references of what the legacy ModelCache
reconcile renders, and the ModelDeployment bridge's calls in a run through its whole
lifecycle against the fake apiserver. k8s/base is read as ``kubectl kustomize`` prints it.
"""

from __future__ import annotations

import ast
import copy
import importlib
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from flexinfer_common.api import MODEL_FINALIZER
from flexinfer_common.kube.client import KubeClient, Resource
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_controller.adapters.kube import resources as kube_resources
from flexinfer_controller.adapters.kube.deployments import deployment_bridge
from flexinfer_controller.backends.registry import default_backends
from flexinfer_controller.legacy.modelcache.plan import claim_object, download_jobs
from flexinfer_controller.legacy.modelcache.plan import plan as cache_plan
from flexinfer_controller.legacy.modelcache.testing import CACHE_SAMPLES, OPTIONS, sample_cache
from flexinfer_controller.runtime.kubernetes import rbac, render_cleanup, render_model
from flexinfer_controller.runtime.kubernetes.plan import Op, cleanup, ensure, read, scale
from flexinfer_controller.runtime.kubernetes.testing import SAMPLES
from flexinfer_testing.repo import repo_root

Grant = tuple[str, str, str]
apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])
ADAPTERS = Path(kube_resources.__file__).parent
_METHOD = re.compile(r"^(create|get|read|list|patch|replace|delete)_(\w+)$")
_VERBS = {"create": "create", "get": "get", "read": "get", "list": "list", "patch": "patch",
          "replace": "update", "delete": "delete"}  # fmt: skip
_CORE = {"config_map": "configmaps", "service": "services", "pod": "pods", "node": "nodes",
         "persistent_volume_claim": "persistentvolumeclaims", "event": "events",
         "secret": "secrets"}  # fmt: skip
_BATCH = {"job": "jobs"}
_OWNERS = {"Model": "models", "ModelCache": "modelcaches"}
"""Owner kind -> plural, for ``<plural>/finalizers`` update (blockOwnerDeletion)."""


def _custom_resources() -> list[Resource]:
    return [v for v in vars(kube_resources).values() if isinstance(v, Resource)]


def _declared_resources(path: Path, tree: ast.Module) -> list[Resource]:
    """The ``Resource`` constants ``path`` itself assigns at module level."""
    names = [
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and getattr(node.value.func, "id", None) == "Resource"
        for target in node.targets
        if isinstance(target, ast.Name)
    ]
    if not names:
        return []
    module = importlib.import_module(f"{kube_resources.__package__}.{path.stem}")
    return [getattr(module, name) for name in names]


def _grants_of_method(
    owner: str, method: str, resources: list[Resource] | None = None
) -> set[Grant]:
    match = _METHOD.match(method)
    assert match is not None
    verb, rest = _VERBS[match.group(1)], match.group(2)
    rest = rest.replace("namespaced_", "").replace("cluster_", "")
    rest = rest.removesuffix("_for_all_namespaces")
    status = rest.endswith("_status")
    rest = rest.removesuffix("_status")
    suffix = "/status" if status else ""
    if rest == "custom_object":
        return {(r.group, r.plural + suffix, verb) for r in resources or _custom_resources()}
    if owner == "batch":
        return {("batch", _BATCH[rest] + suffix, verb)}
    return {("", _CORE[rest] + suffix, verb)}


def _client_calls(tree: ast.AST) -> set[tuple[str, str]]:
    """(API, method) called on the client's APIs (``….core.x``, ``….custom.x``, ``….batch.x``)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _METHOD.match(node.attr):
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name in ("core", "custom", "batch"):
                found.add((name, node.attr))
    return found


def _watches(tree: ast.AST) -> bool:
    """Whether a list call is made with ``watch=True`` (a dict entry or a keyword)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "watch":
                    return isinstance(value, ast.Constant) and value.value is True
        if isinstance(node, ast.keyword) and node.arg == "watch":
            return True
    return False


def _listed(method: str) -> bool:
    return method.startswith("list_")


def _core_list_watches(tree: ast.AST) -> set[Grant]:
    """The core kinds an adapter follows through the shared ``CoreListWatch``
    (flexinfer_common.kube.listwatch), which lists and watches the plural it is given:
    ``CoreListWatch(client, "pods", ...)``, or ``super().__init__(client, "pods", ...)`` in
    a subclass."""
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "CoreListWatch"
    ]
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef) and any(
            getattr(base, "id", None) == "CoreListWatch" for base in cls.bases
        ):
            calls += [
                node
                for node in ast.walk(cls)
                if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "__init__"
            ]
    plurals = {
        call.args[1].value
        for call in calls
        if len(call.args) > 1 and isinstance(call.args[1], ast.Constant)
    }
    return {("", str(plural), verb) for plural in plurals for verb in ("list", "watch")}


def adapter_grants() -> set[Grant]:
    """What the kube adapters' client calls need (a file that watches watches what it lists)."""
    grants: set[Grant] = set()
    for path in sorted(ADAPTERS.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        calls, own = _client_calls(tree), _declared_resources(path, tree)
        for owner, method in calls:
            grants |= _grants_of_method(owner, method, own)
        if _watches(tree):
            listed = set().union(*(_grants_of_method(o, m, own) for o, m in calls if _listed(m)))
            grants |= {(group, resource, "watch") for group, resource, _ in listed}
        grants |= _core_list_watches(tree)
    return grants


def _drifted(obj: dict[str, Any]) -> dict[str, Any]:
    live = copy.deepcopy(obj)
    live["metadata"]["labels"] = {}
    return live


def plan_grants() -> set[Grant]:
    """What the runtime's plan needs for every rendered object, on create, update, delete."""
    grants: set[Grant] = set()
    backends = default_backends()
    for sample in SAMPLES:
        objects = render_model(sample.model(), backends, sample.options())
        on_delete = render_cleanup(sample.model(), backends, sample.options(), ["n"])
        ops: list[Op | None] = [read(o) for o in objects]
        ops += [ensure(o, None) for o in objects] + [ensure(o, _drifted(o)) for o in objects]
        ops += cleanup(objects, on_delete)
        ops += [scale(o, 0) for o in objects if o["kind"] == "Deployment"]
        grants |= {(op.group, op.resource, op.verb) for op in ops if op is not None}
        grants |= _owner_grants(objects)
    return grants


def _owner_grants(objects: list[dict[str, Any]]) -> set[Grant]:
    """``<owner>/finalizers`` update for each owner reference with blockOwnerDeletion."""
    return {
        ("ai.flexinfer", f"{_OWNERS[ref['kind']]}/finalizers", "update")
        for obj in objects
        for ref in obj["metadata"].get("ownerReferences", [])
        if ref.get("blockOwnerDeletion")
    }


def modelcache_grants() -> set[Grant]:
    """What the owner references of the ModelCache reconcile's PVCs and Jobs need (its
    calls are the adapters', scanned above)."""
    grants: set[Grant] = set()
    for manifest in CACHE_SAMPLES:
        plan = cache_plan(sample_cache(manifest))
        objects = [o for o in [claim_object(plan)] if o is not None]
        grants |= _owner_grants(objects + download_jobs(plan, OPTIONS, ["n"]))
    return grants


def _static_table() -> set[Grant]:
    return {g for g in rbac.grants() if g[1] not in rbac.BRIDGED | rbac.GROUPED}


def test_the_table_is_what_the_code_uses() -> None:
    derived = adapter_grants() | plan_grants() | modelcache_grants()
    assert _static_table() == derived, (
        f"granted but unused: {sorted(_static_table() - derived)}; "
        f"used but not granted: {sorted(derived - _static_table())}"
    )


def _phase(api: KubeApiServer, resource: str) -> str | None:
    return ((api.get(resource, "default", "chat") or {}).get("status") or {}).get("phase")


async def _bridge_lifecycle(api: KubeApiServer) -> None:
    """One ModelDeployment created, served (Running), deleted, with the bridge on ``api``."""
    client = KubeClient(api.url)
    bridge = deployment_bridge(client, ["default"])
    await bridge.start()
    try:
        spec = {"backend": "vllm", "model": "org/chat"}
        meta = {"name": "chat", "namespace": "default"}
        api.create("modeldeployments", {"kind": "ModelDeployment", "metadata": meta, "spec": spec})
        await api.until(lambda a: a.get("models", "default", "chat") is not None, within_s=20)
        api.patch("models", "default", "chat", {"metadata": {"finalizers": [MODEL_FINALIZER]}})
        api.set_status("models", "default", "chat", {"phase": "Ready"})
        await api.until(lambda a: _phase(a, "modeldeployments") == "Running", within_s=20)
        api.delete("modeldeployments", "default", "chat")
        await api.until(lambda a: _phase(a, "modeldeployments") == "Terminating", within_s=20)
        await api.until(lambda a: a.count(verb="delete", resource="models") == 1, within_s=20)
        api.patch("models", "default", "chat", {"metadata": {"finalizers": []}})
        await api.until(lambda a: a.get("modeldeployments", "default", "chat") is None)
    finally:
        await bridge.stop()
        await client.close()


async def test_the_bridge_uses_exactly_its_rows(apiserver: KubeApiServer) -> None:
    await _bridge_lifecycle(apiserver)
    used = {(c.group, c.rbac_resource, c.verb) for c in apiserver.calls}
    bridged = {g for g in rbac.grants() if g[1] in rbac.BRIDGED}
    assert {g for g in used if g[1] in rbac.BRIDGED} == bridged
    assert used <= rbac.grants(), f"used but not granted: {sorted(used - rbac.grants())}"


def test_the_scan_sees_the_adapters_calls() -> None:
    grants = adapter_grants()
    assert ("", "configmaps", "patch") in grants
    assert ("ai.flexinfer", "models/status", "patch") in grants
    assert ("ai.flexinfer", "loraadapters", "watch") in grants
    assert ("ai.flexinfer", "modelcatalogs/status", "patch") in grants
    assert ("", "secrets", "get") in grants
    assert ("", "pods", "watch") in grants
    assert ("", "pods", "patch") in grants
    assert ("ai.flexinfer", "modelcaches", "watch") in grants
    assert ("ai.flexinfer", "modelcaches", "create") not in grants  # only its own file's calls
    assert ("batch", "jobs", "list") in grants
    assert ("batch", "jobs", "watch") not in grants


def _kustomized() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: the kustomize rendering cannot be checked")
    done = subprocess.run(
        [kubectl, "kustomize", str(repo_root() / "k8s" / "base")],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _bound_to_controller(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The (Cluster)Roles bound to the controller's ServiceAccount."""
    names = set()
    for binding in objects:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        subjects = binding.get("subjects") or []
        if any(s.get("kind") == "ServiceAccount" and s["name"] == "flexinfer-controller"
               for s in subjects):  # fmt: skip
            names.add((binding["roleRef"]["kind"], binding["roleRef"]["name"]))
    return [o for o in objects if (o["kind"], o["metadata"].get("name")) in names]


def test_the_controller_role_grants_exactly_the_table() -> None:
    roles = _bound_to_controller(_kustomized())
    assert [r["kind"] for r in roles] == ["ClusterRole"]
    granted = {
        (group, resource, verb)
        for role in roles
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert not {g for g in granted if "*" in g}, "no wildcards"
    assert granted == rbac.grants(), (
        f"extra: {sorted(granted - rbac.grants())}; missing: {sorted(rbac.grants() - granted)}"
    )
