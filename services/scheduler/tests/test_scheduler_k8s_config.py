"""k8s/scheduler's KubeSchedulerConfiguration: only kube-scheduler's v1 field names, and an
extender that points at this service's Service, port and routes.

kubernetes-validate has no schema for kubescheduler.config.k8s.io (it is a component config,
not an API object), so the field names are checked against the v1 Go types' JSON tags.
"""

from __future__ import annotations

from typing import Any

import yaml

from flexinfer_scheduler.app import create_app
from flexinfer_scheduler.settings import SchedulerSettings
from flexinfer_testing.repo import repo_root

CONFIG = repo_root() / "k8s/scheduler/kube-scheduler-config.yaml"
# k8s.io/kube-scheduler/config/v1 KubeSchedulerConfiguration, Extender, and their parts.
TOP = {
    "apiVersion", "kind", "parallelism", "leaderElection", "clientConnection",
    "healthzBindAddress", "metricsBindAddress", "enableProfiling", "enableContentionProfiling",
    "percentageOfNodesToScore", "podInitialBackoffSeconds", "podMaxBackoffSeconds",
    "profiles", "extenders", "delayCacheUntilActive",
}  # fmt: skip
EXTENDER = {
    "urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb",
    "enableHTTPS", "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources",
    "ignorable",
}  # fmt: skip
MANAGED_RESOURCE = {"name", "ignoredByScheduler"}
PROFILE = {"schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig"}
LEADER_ELECTION = {
    "leaderElect", "leaseDuration", "renewDeadline", "retryPeriod", "resourceLock",
    "resourceName", "resourceNamespace",
}  # fmt: skip


def config() -> dict[str, Any]:
    """The shipped configuration."""
    loaded = yaml.safe_load(CONFIG.read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_only_kube_scheduler_v1_fields() -> None:
    doc = config()
    assert doc["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert doc["kind"] == "KubeSchedulerConfiguration"
    assert set(doc) <= TOP
    assert set(doc["leaderElection"]) <= LEADER_ELECTION
    for profile in doc["profiles"]:
        assert set(profile) <= PROFILE
    for extender in doc["extenders"]:
        assert set(extender) <= EXTENDER
        for resource in extender["managedResources"]:
            assert set(resource) <= MANAGED_RESOURCE


def test_the_extender_is_this_service() -> None:
    (extender,) = config()["extenders"]
    base = yaml.safe_load_all((repo_root() / "k8s/base/scheduler.yaml").read_text())
    service = next(d for d in base if d["kind"] == "Service")
    port = service["spec"]["ports"][0]["port"]
    host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc.cluster.local"
    assert extender["urlPrefix"] == f"http://{host}:{port}"
    assert extender["nodeCacheCapable"] is True
    assert isinstance(extender["weight"], int)
    assert extender["weight"] > 0
    routes = set(create_app(SchedulerSettings(port=0)).openapi()["paths"])
    assert {"/" + extender["filterVerb"], "/" + extender["prioritizeVerb"]} <= routes
    assert {r["name"] for r in extender["managedResources"]} == {
        "nvidia.com/gpu",
        "amd.com/gpu",
        "gpu.intel.com/i915",
    }
