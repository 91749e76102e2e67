"""The engine container from a backend's EngineSpec, and the volumes it mounts.

Every pod gets a memory-backed ``/dev/shm`` (engines use shared memory for NCCL and torch
workers, and the container default is 64 MiB); with the flash loader it also holds the
model's copy. A shared-GPU model (cache strategy ``Memory``) uses the node's own /dev/shm,
so a copy outlives the pod across swaps (the cleanup Job removes it on deletion); any
other model gets an emptyDir, freed with its pod.
"""

from __future__ import annotations

from dataclasses import dataclass

from flexinfer_controller.backends.base import EngineSpec, Probe
from flexinfer_controller.flashload.render import CACHE_VOLUME, TMPFS_MOUNT, TMPFS_VOLUME
from flexinfer_controller.runtime.kubernetes.cache import CachePlan
from flexinfer_controller.runtime.kubernetes.names import Obj

ENGINE_CONTAINER = "engine"
PORT_NAME = "http"


@dataclass(frozen=True)
class Mounts:
    """The engine's volume layout."""

    cache: CachePlan
    model_mount: str
    tmpfs_size_limit: str
    node_tmpfs: bool
    """The node's /dev/shm (hostPath) rather than an emptyDir."""


def probe(spec: Probe) -> Obj:
    """A Probe as a Kubernetes probe (HTTP GET, or a TCP connect when it has no path)."""
    handler: Obj = (
        {"httpGet": {"path": spec.path, "port": spec.port}}
        if spec.path is not None
        else {"tcpSocket": {"port": spec.port}}
    )
    return {
        **handler,
        "initialDelaySeconds": spec.initial_delay_s,
        "periodSeconds": spec.period_s,
        "timeoutSeconds": spec.timeout_s,
        "failureThreshold": spec.failure_threshold,
    }


def volumes(mounts: Mounts) -> list[Obj]:
    """The cache volume (a PVC or a node directory) and the tmpfs."""
    out: list[Obj] = []
    cache = mounts.cache
    if cache.claim is not None:
        claim = {"claimName": cache.claim, "readOnly": cache.read_only}
        out.append({"name": CACHE_VOLUME, "persistentVolumeClaim": claim})
    elif cache.host_path is not None:
        kind = "Directory" if cache.fetch is None else "DirectoryOrCreate"
        out.append({"name": CACHE_VOLUME, "hostPath": {"path": cache.host_path, "type": kind}})
    if mounts.node_tmpfs:
        out.append({"name": TMPFS_VOLUME, "hostPath": {"path": TMPFS_MOUNT, "type": "Directory"}})
    else:
        tmpfs = {"medium": "Memory", "sizeLimit": mounts.tmpfs_size_limit}
        out.append({"name": TMPFS_VOLUME, "emptyDir": tmpfs})
    return out


def volume_mounts(mounts: Mounts) -> list[Obj]:
    """The engine's mounts: the cache read-only at the model mount, the tmpfs at /dev/shm."""
    out: list[Obj] = []
    if mounts.cache.has_volume:
        out.append({"name": CACHE_VOLUME, "mountPath": mounts.model_mount, "readOnly": True})
    out.append({"name": TMPFS_VOLUME, "mountPath": TMPFS_MOUNT})
    return out


def container(spec: EngineSpec, resources: Obj, mounts: Mounts) -> Obj:
    """The ``engine`` container: image, command, args, env, port, probes, mounts."""
    out: Obj = {"name": ENGINE_CONTAINER, "image": spec.image, "imagePullPolicy": "IfNotPresent"}
    if spec.command:
        out["command"] = list(spec.command)
    if spec.args:
        out["args"] = list(spec.args)
    env: list[Obj] = [{"name": k, "value": v} for k, v in sorted(spec.env.items())]
    env += [
        {"name": k, "valueFrom": {"fieldRef": {"fieldPath": path}}}
        for k, path in sorted(spec.field_env.items())
    ]
    env += [
        {"name": k, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}
        for k, ref in sorted(spec.secret_env.items())
    ]
    if env:
        out["env"] = env
    out["ports"] = [{"name": PORT_NAME, "containerPort": spec.port, "protocol": "TCP"}]
    out["readinessProbe"] = probe(spec.readiness)
    if spec.startup is not None:
        out["startupProbe"] = probe(spec.startup)
    out["resources"] = resources
    out["volumeMounts"] = volume_mounts(mounts)
    return out
