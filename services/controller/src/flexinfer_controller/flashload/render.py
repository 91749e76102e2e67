"""The Kubernetes side as plain dicts: the flash-load init container and the cleanup Job.

The init container copies from the model cache PVC (mounted read-only) into a
memory-backed emptyDir mounted at ``/dev/shm``, which the engine container mounts too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flexinfer_controller.flashload.plan import safe_name
from flexinfer_controller.flashload.settings import FlashLoadSettings

IMAGE = "flexinfer/controller"
"""The controller's image has the flash loader (``python -m flexinfer_controller.flashload``)."""

MODULE = ["python", "-m", "flexinfer_controller.flashload"]
TMPFS_VOLUME = "flash-tmpfs"
CACHE_VOLUME = "model-cache"
TMPFS_MOUNT = "/dev/shm"
_UID = 10001
"""The uid every FlexInfer image runs as (see the Dockerfiles)."""


@dataclass(frozen=True)
class FlashPod:
    """What the init container of one Model's pod needs to know."""

    key: str
    """The Model's ``namespace/name``: names the copy ``/dev/shm/<namespace>_<name>``."""
    cache_claim: str
    """The model cache PVC."""
    model_subpath: str = ""
    """The model's directory inside the PVC (empty: the PVC's root)."""
    cache_mount: str = "/models"
    """Where the PVC is mounted in the init container."""
    tmpfs_size_limit: str = "8Gi"
    """sizeLimit of the memory emptyDir (the operator's ``DEFAULT_SHM_SIZE_LIMIT``)."""
    image: str = IMAGE

    @property
    def launch_path(self) -> str:
        """Where the engine container finds the copy."""
        return f"{TMPFS_MOUNT}/{safe_name(self.key)}"


def _security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": _UID,
        "runAsGroup": _UID,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def init_container(pod: FlashPod, settings: FlashLoadSettings) -> dict[str, Any]:
    """The ``flash-loader`` init container: PVC -> tmpfs, with the settings as flags."""
    source = "/".join(part for part in (pod.cache_mount, pod.model_subpath.strip("/")) if part)
    command = [
        *MODULE,
        "--source",
        source,
        "--dest",
        TMPFS_MOUNT,
        "--name",
        pod.key,
        "--workers",
        str(settings.concurrency),
        "--chunk-mb",
        str(settings.chunk_size_mb),
        "--margin-mb",
        str(settings.margin_mb),
        "--reuse-check",
        settings.reuse_check,
    ]
    command += ["--verify-integrity"] if settings.verify_integrity else []
    command += [arg for pattern in settings.exclude for arg in ("--exclude", pattern)]
    return {
        "name": "flash-loader",
        "image": pod.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
        "volumeMounts": [
            {"name": CACHE_VOLUME, "mountPath": pod.cache_mount, "readOnly": True},
            {"name": TMPFS_VOLUME, "mountPath": TMPFS_MOUNT},
        ],
        # No memory limit: tmpfs pages are charged to the cgroup that writes them, so a
        # limit below the model's size would OOM-kill the copy; the emptyDir's sizeLimit
        # bounds it instead.
        "resources": {"requests": {"cpu": "500m", "memory": "128Mi"}},
        "securityContext": _security_context(),
    }


def pod_volumes(pod: FlashPod) -> list[dict[str, Any]]:
    """The pod's volumes the init container mounts: the cache PVC and the memory emptyDir."""
    return [
        {
            "name": CACHE_VOLUME,
            "persistentVolumeClaim": {"claimName": pod.cache_claim, "readOnly": True},
        },
        {"name": TMPFS_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": pod.tmpfs_size_limit}},
    ]


def engine_volume_mount() -> dict[str, Any]:
    """The engine container's mount of the copy (read-write: engines use /dev/shm too)."""
    return {"name": TMPFS_VOLUME, "mountPath": TMPFS_MOUNT}


def cleanup_job(
    name: str,
    namespace: str,
    keep: list[str],
    *,
    host_path: str = TMPFS_MOUNT,
    node_name: str | None = None,
    image: str = IMAGE,
) -> dict[str, Any]:
    """A Job removing every flash copy in a node's tmpfs ``host_path`` but those in ``keep``.

    An emptyDir is freed with its pod; the Job is for a tmpfs that outlives pods (a node's
    hostPath shared by the models swapping on one GPU), so it runs on that node.
    """
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": {"fsGroup": _UID},
        "containers": [
            {
                "name": "flash-cleanup",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": [
                    *MODULE,
                    "cleanup",
                    "--dest",
                    TMPFS_MOUNT,
                    *[arg for key in keep for arg in ("--keep", key)],
                ],
                "volumeMounts": [{"name": TMPFS_VOLUME, "mountPath": TMPFS_MOUNT}],
                "resources": {
                    "requests": {"cpu": "50m", "memory": "64Mi"},
                    "limits": {"memory": "128Mi"},
                },
                "securityContext": _security_context(),
            }
        ],
        "volumes": [{"name": TMPFS_VOLUME, "hostPath": {"path": host_path, "type": "Directory"}}],
    }
    if node_name is not None:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/component": "flash-cleanup"},
        },
        "spec": {
            "backoffLimit": 2,
            "ttlSecondsAfterFinished": 300,
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/component": "flash-cleanup"}},
                "spec": spec,
            },
        },
    }
