"""A test stand-in for the Deployment controller and the kubelet, on the fake apiserver.

The fake apiserver runs no controllers. This plays both, simply: each pass makes the pods
of every Deployment match its spec.replicas and current template (pods of an older
template go, extra pods go lowest ``pod-deletion-cost`` first, pods of a deleted
Deployment go), and marks each new pod Running and Ready on its own podIP, or, for a
Model listed in ``crashing``, in CrashLoopBackOff. As a ReplicaSet, it counts no pod in
phase Failed: it makes a replacement and leaves the failed pod for someone to delete.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
from collections.abc import AsyncIterator
from typing import Any

from flexinfer_common.testing.kube_apiserver import KubeApiServer
from flexinfer_common.testing.kube_apiserver.syncing import sync_after_changes
from flexinfer_controller.runtime.kubernetes.names import MODEL_KEY_ANNOTATION
from flexinfer_controller.runtime.kubernetes.pods import (
    DELETION_COST_ANNOTATION,
    TEMPLATE_HASH_ANNOTATION,
)

Obj = dict[str, Any]
OWNER_ANNOTATION = "test.flexinfer.ai/deployment"
JOB_COMPLETE: Obj = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
"""A Job's status once the Job controller saw it succeed."""
JOB_FAILED: Obj = {
    "failed": 4,
    "conditions": [
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
         "message": "Job has reached the specified backoff limit"},
    ],
}  # fmt: skip
"""A Job's status once the Job controller gave up on it (its backoffLimit of 3 retries)."""


def finished_job_pod(api: KubeApiServer, job: Obj, message: str, *, uid: str = "") -> Obj:
    """The pod the Job controller makes for ``job``, run until its container exited 0 having
    written ``message`` to its termination log (owned by the Job of ``uid``: default
    ``job``'s own)."""
    meta, template = job["metadata"], job["spec"]["template"]
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
             "uid": uid or meta["uid"], "controller": True}  # fmt: skip
    labels = {**template["metadata"].get("labels", {}), "job-name": meta["name"]}
    pod = api.create("pods", {
        "metadata": {"generateName": f"{meta['name']}-", "namespace": meta["namespace"],
                     "labels": labels, "ownerReferences": [owner]},
        "spec": template["spec"],
    })  # fmt: skip
    terminated = {"exitCode": 0, "reason": "Completed", "message": message}
    container = {"name": template["spec"]["containers"][0]["name"], "ready": False,
                 "restartCount": 0, "image": "registry", "imageID": "",
                 "state": {"terminated": terminated}}  # fmt: skip
    status = {"phase": "Succeeded", "containerStatuses": [container]}
    return api.set_status("pods", meta["namespace"], pod["metadata"]["name"], status)


def _cost(pod: Obj) -> int:
    return int((pod["metadata"].get("annotations") or {}).get(DELETION_COST_ANNOTATION) or 0)


def _hash(meta: Obj) -> str:
    return str((meta.get("annotations") or {}).get(TEMPLATE_HASH_ANNOTATION, ""))


class Kubelet:
    """Runs passes until stopped; ``crashing`` holds Model keys whose engines crash."""

    def __init__(self, api: KubeApiServer) -> None:
        self.api = api
        self.crashing: set[str] = set()
        self.node = "node-1"
        """The node new pods are bound to, as the scheduler would (spec.nodeName)."""
        self.pod_network = "10.1.0."
        """Prefix of the podIPs it hands out (a loopback one, 127.x.y., lets a test serve a
        pod's engine at its podIP on this machine)."""
        self._ips = itertools.count(2)
        self._names = itertools.count(1)
        self.environments: dict[str, dict[str, str]] = {}
        """Each pod's first container's environment, by pod name, as resolved when the
        pod was made (``container_env``)."""

    def sync(self) -> None:
        """One pass over every Deployment and pod."""
        deployments = {
            (d["metadata"]["namespace"], d["metadata"]["name"]): d
            for d in self.api.objects("deployments")
        }
        by_owner: dict[tuple[str, str], list[Obj]] = {}
        for pod in self.api.objects("pods"):
            owner = (pod["metadata"].get("annotations") or {}).get(OWNER_ANNOTATION)
            by_owner.setdefault((pod["metadata"]["namespace"], str(owner)), []).append(pod)
        for key, pods in by_owner.items():
            if key not in deployments:
                self._delete(pods)
        for key, deployment in deployments.items():
            self._match(deployment, by_owner.get(key, []))

    def _match(self, deployment: Obj, pods: list[Obj]) -> None:
        template = deployment["spec"]["template"]
        pods = [p for p in pods if (p.get("status") or {}).get("phase") != "Failed"]
        current = [p for p in pods if _hash(p["metadata"]) == _hash(template["metadata"])]
        self._delete([p for p in pods if p not in current])
        wanted = int(deployment["spec"].get("replicas") or 0)
        extra = sorted(current, key=_cost)[: max(0, len(current) - wanted)]
        self._delete(extra)
        for _ in range(wanted - len(current)):
            self._create(deployment, template)

    def _delete(self, pods: list[Obj]) -> None:
        for pod in pods:
            with contextlib.suppress(Exception):  # deleted by an earlier pass
                self.api.delete("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])

    def _create(self, deployment: Obj, template: Obj) -> None:
        meta = copy.deepcopy(template["metadata"])
        namespace = deployment["metadata"]["namespace"]
        meta.update(
            name=f"{deployment['metadata']['name']}-{next(self._names)}", namespace=namespace
        )
        meta.setdefault("annotations", {})[OWNER_ANNOTATION] = deployment["metadata"]["name"]
        spec = copy.deepcopy(template["spec"])
        spec.setdefault("nodeName", self.node)
        pod = self.api.create("pods", {"metadata": meta, "spec": spec})
        name = pod["metadata"]["name"]
        self.environments[name] = container_env(self.api, namespace, spec["containers"][0])
        model = meta["annotations"].get(MODEL_KEY_ANNOTATION)
        container = template["spec"]["containers"][0]["name"]
        if model in self.crashing:
            self.api.set_status("pods", namespace, name, crash_status(container, restarts=1))
        else:
            status = {
                "phase": "Running", "podIP": f"{self.pod_network}{next(self._ips)}",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [
                    {"name": container, "ready": True, "restartCount": 0, "image": "engine",
                     "imageID": "", "state": {"running": {}}}
                ],
            }  # fmt: skip
            self.api.set_status("pods", namespace, name, status)


def container_env(api: KubeApiServer, namespace: str, container: Obj) -> dict[str, str]:
    """The variables a kubelet would start ``container`` with: plain values, and ConfigMap
    or Secret keys read now (an optional one that is absent is left out). Field refs are
    the pod's own status, not known here, and are left out too."""
    out: dict[str, str] = {}
    for item in container.get("env") or []:
        source = item.get("valueFrom") or {}
        if "value" in item:
            out[item["name"]] = item["value"]
        elif (ref := source.get("configMapKeyRef") or source.get("secretKeyRef")) is not None:
            kind = "configmaps" if "configMapKeyRef" in source else "secrets"
            found = api.get(kind, namespace, ref["name"]) or {}
            value = (found.get("data") or {}).get(ref["key"])
            if value is None and not ref.get("optional"):
                raise LookupError(f"{kind} {namespace}/{ref['name']} has no key {ref['key']}")
            if value is not None:
                out[item["name"]] = value
    return out


def crash_status(container: str, restarts: int) -> Obj:
    """A pod whose engine exited with 1 ``restarts`` times and is backing off."""
    return {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "False"}],
        "containerStatuses": [
            {
                "name": container, "ready": False, "restartCount": restarts, "image": "engine",
                "imageID": "",
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
            }
        ],
    }  # fmt: skip


@contextlib.asynccontextmanager
async def running_kubelet(api: KubeApiServer) -> AsyncIterator[Kubelet]:
    """A Kubelet making a pass after every change on the apiserver, until the block ends."""
    kubelet = Kubelet(api)
    async with sync_after_changes(api, kubelet.sync):
        yield kubelet
