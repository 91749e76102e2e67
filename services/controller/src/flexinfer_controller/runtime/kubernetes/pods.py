"""What an engine pod says about its replica: pure reads of a pod as the apiserver has it.

A replica of a Model is one pod of the Model's Deployment. The runtime stamps the pod
template with the Model's key and a hash of the rendered template, and the Deployment
with the Model generation that template was rendered from; a pod whose hash is the
Deployment's current one serves that generation, any other is a leftover of a rollout.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flexinfer_controller.flashload.render import TMPFS_VOLUME
from flexinfer_controller.runtime.kubernetes.engine import PORT_NAME
from flexinfer_controller.runtime.kubernetes.names import (
    COMPONENT_LABEL,
    MANAGED_BY,
    MODEL_KEY_ANNOTATION,
    Obj,
)

TEMPLATE_HASH_ANNOTATION = "flexinfer.ai/template-hash"
"""On the pod template: which rendering of the Model's pod a pod was made from."""
GENERATION_ANNOTATION = "flexinfer.ai/model-generation"
"""On the Deployment: the Model generation its current template was rendered from."""
DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
FIRST_TO_GO = str(-(2**31))
"""The lowest pod-deletion-cost: the ReplicaSet removes this pod first when scaled down."""
ENGINE_SELECTOR = f"{COMPONENT_LABEL}=engine,{MANAGED_BY[0]}={MANAGED_BY[1]}"
"""The label selector of every engine pod the controller's Deployments make."""
CRASH_REASONS = frozenset({"CrashLoopBackOff", "Error", "OOMKilled"})
SLEEPING_ANNOTATION = "flexinfer.ai/sleeping"
"""On an engine pod the controller put to sleep: the sleep level (removed once it woke).
Kept on the pod, so that a restarted controller still knows it sleeps."""
DEVICE_RESOURCES = frozenset({"nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915"})
"""The device plugins' GPU resources (``scheduling.GPU_RESOURCES``)."""


def template_hash(template: Obj) -> str:
    """A short digest of a rendered pod template (before it is stamped)."""
    text = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def stamp(deployment: Obj, model_key: str, generation: int) -> str:
    """Mark the Deployment and its template as described above; the template's hash."""
    template = deployment["spec"]["template"]
    digest = template_hash(template)
    notes = template["metadata"].setdefault("annotations", {})
    notes[TEMPLATE_HASH_ANNOTATION] = digest
    notes[MODEL_KEY_ANNOTATION] = model_key
    deployment["metadata"].setdefault("annotations", {})[GENERATION_ANNOTATION] = str(generation)
    return digest


@dataclass(frozen=True, slots=True)
class PodView:
    """The facts of one engine pod the runtime acts on."""

    key: str
    """namespace/pod name."""
    uid: str
    name: str
    namespace: str
    model: str
    template_hash: str
    deleting: bool
    failed: bool
    ready: bool
    url: str | None
    node: str | None
    node_tmpfs: bool
    """Its /dev/shm is the node's own (a hostPath): a copy there outlives the pod."""
    restarts: int
    crash: str | None
    """What its engine's last crash was (a non-zero exit, CrashLoopBackOff)."""
    crash_looping: bool
    """Its engine is down now: CrashLoopBackOff, or the pod failed."""
    created_at: float
    sleeping: bool = False
    """It carries ``SLEEPING_ANNOTATION``: its engine sleeps (or is being put to sleep)."""
    device: str | None = None
    """The device plugin's GPU resource it was allocated (``nvidia.com/gpu``), if any."""


def _created(meta: Obj) -> float:
    stamp_ = meta.get("creationTimestamp")
    if not isinstance(stamp_, str):
        return 0.0
    try:
        return datetime.fromisoformat(stamp_.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _port(spec: Obj) -> int | None:
    for container in spec.get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == PORT_NAME:
                return int(port["containerPort"])
    return None


def _ready(status: Obj) -> bool:
    conditions = status.get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _node_tmpfs(spec: Obj) -> bool:
    return any(v.get("name") == TMPFS_VOLUME and "hostPath" in v for v in spec.get("volumes") or [])


def _crash(statuses: list[Any], pod_status: Obj) -> str | None:
    for status in statuses:
        waiting = (status.get("state") or {}).get("waiting") or {}
        last = (status.get("lastState") or {}).get("terminated") or {}
        now = (status.get("state") or {}).get("terminated") or {}
        for terminated in (now, last):
            code = terminated.get("exitCode")
            if code not in (None, 0):
                why = waiting.get("reason") or terminated.get("reason") or "Error"
                return f"container {status.get('name')}: {why}, exit code {code}"
        if waiting.get("reason") in CRASH_REASONS:
            return f"container {status.get('name')}: {waiting['reason']}"
    if pod_status.get("phase") != "Failed":
        return None
    # Evicted, NodeLost...: the kubelet's reason for the whole pod, where it gave one.
    why = ": ".join(str(pod_status[k]) for k in ("reason", "message") if pod_status.get(k))
    return f"pod failed: {why}" if why else "pod failed"


def _device(spec: Obj) -> str | None:
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        for kind in ("limits", "requests"):
            for name, amount in (resources.get(kind) or {}).items():
                if name in DEVICE_RESOURCES and str(amount) not in ("0", ""):
                    return str(name)
    return None


def view(pod: Obj) -> PodView | None:
    """The pod's facts; None for a pod no Model's runtime stamped."""
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    notes = meta.get("annotations") or {}
    model = notes.get(MODEL_KEY_ANNOTATION)
    if not model:
        return None
    statuses = status.get("containerStatuses") or []
    ip, port = status.get("podIP"), _port(spec)
    return PodView(
        key=f"{meta['namespace']}/{meta['name']}", uid=str(meta.get("uid") or ""),
        name=meta["name"],
        namespace=meta["namespace"], model=model,
        template_hash=notes.get(TEMPLATE_HASH_ANNOTATION, ""),
        deleting=meta.get("deletionTimestamp") is not None,
        failed=status.get("phase") == "Failed", ready=_ready(status),
        url=f"http://{ip}:{port}" if ip and port else None, node=spec.get("nodeName"),
        node_tmpfs=_node_tmpfs(spec),
        restarts=sum(int(s.get("restartCount") or 0) for s in statuses),
        crash=_crash(statuses, status), created_at=_created(meta),
        sleeping=SLEEPING_ANNOTATION in notes, device=_device(spec),
        crash_looping=status.get("phase") == "Failed" or any(
            ((s.get("state") or {}).get("waiting") or {}).get("reason") == "CrashLoopBackOff"
            for s in statuses
        ),
    )  # fmt: skip
