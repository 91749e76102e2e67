"""The resource types the fake serves: the built-in kinds and any CRD loaded from YAML."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from flexinfer_common.testing.kube_apiserver import defaults
from flexinfer_common.testing.kube_apiserver.schema import CrdSchema

Defaulter = Callable[[dict[str, Any], dict[str, Any] | None], None]
"""Fills server-side defaults into a new object (given the stored one on updates)."""


@dataclass(frozen=True)
class ResourceType:
    """One REST resource: its paths, its kind, and how writes to it behave."""

    group: str
    """"" for the core group (paths under /api/v1)."""
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status_subresource: bool = False
    tracks_generation: bool = False
    """metadata.generation exists and is bumped when anything but metadata and status changes."""
    unconditional_update: bool = True
    """A PUT may omit metadata.resourceVersion (custom resources refuse that: 422)."""
    returns_deleted_object: bool = False
    """DELETE answers the object (custom resources, Pods); others answer a Status."""
    initial_status: dict[str, Any] | None = None
    """The status a create stores when the type has a status subresource (None: none)."""
    extra_subresources: frozenset[str] = frozenset()
    defaulter: Defaulter | None = field(default=None, compare=False)
    schema: CrdSchema | None = field(default=None, compare=False)

    @property
    def api_version(self) -> str:
        """``group/version``, or ``v1`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        """Where its REST paths start."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    @property
    def qualified(self) -> str:
        """``plural.group`` (just ``plural`` for the core group), as RBAC and kubectl name it."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def builtin_types() -> list[ResourceType]:
    """The built-in kinds a FlexInfer deployment touches."""
    apps, batch, policy, lease = "apps", "batch", "policy", "coordination.k8s.io"
    return [
        ResourceType("", "v1", "namespaces", "Namespace", namespaced=False),
        ResourceType("", "v1", "nodes", "Node", namespaced=False, status_subresource=True),
        ResourceType("", "v1", "configmaps", "ConfigMap"),
        ResourceType("", "v1", "secrets", "Secret", defaulter=defaults.secret),
        ResourceType("", "v1", "serviceaccounts", "ServiceAccount"),
        ResourceType("", "v1", "events", "Event"),
        ResourceType(
            "", "v1", "services", "Service", status_subresource=True,
            initial_status={"loadBalancer": {}}, defaulter=defaults.service,
        ),
        ResourceType(
            "", "v1", "persistentvolumeclaims", "PersistentVolumeClaim",
            status_subresource=True, initial_status={"phase": "Pending"},
            defaulter=defaults.persistent_volume_claim,
        ),
        ResourceType(
            "", "v1", "pods", "Pod", status_subresource=True, returns_deleted_object=True,
            initial_status={"phase": "Pending"}, extra_subresources=frozenset({"log"}),
            defaulter=defaults.pod,
        ),
        ResourceType(
            apps, "v1", "deployments", "Deployment", status_subresource=True,
            tracks_generation=True, initial_status={}, defaulter=defaults.deployment,
        ),
        ResourceType(
            batch, "v1", "jobs", "Job", status_subresource=True, tracks_generation=True,
            initial_status={}, defaulter=defaults.job,
        ),
        ResourceType(
            policy, "v1", "poddisruptionbudgets", "PodDisruptionBudget",
            status_subresource=True, tracks_generation=True,
            initial_status={
                "disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0,
                "expectedPods": 0,
            },
        ),
        ResourceType(lease, "v1", "leases", "Lease"),
    ]  # fmt: skip


def crd_types(document: dict[str, Any]) -> list[ResourceType]:
    """The served versions of one CustomResourceDefinition document."""
    spec = document["spec"]
    names = spec["names"]
    out = []
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema") or {"type": "object"}
        out.append(
            ResourceType(
                spec["group"],
                version["name"],
                names["plural"],
                names["kind"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                status_subresource="status" in (version.get("subresources") or {}),
                tracks_generation=True,
                unconditional_update=False,
                returns_deleted_object=True,
                schema=CrdSchema(names["kind"], schema),
            )
        )
    return out


def load_crds(paths: Iterable[Path]) -> list[ResourceType]:
    """Every CRD in the YAML files (or directories of them) at ``paths``; the rest skipped."""
    files: list[Path] = []
    for path in paths:
        files.extend(sorted(path.glob("*.yaml")) if path.is_dir() else [path])
    types: list[ResourceType] = []
    for file in files:
        for document in yaml.safe_load_all(file.read_text(encoding="utf-8")):
            if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
                types.extend(crd_types(document))
    return types


def find_crd_dir(start: Path) -> Path:
    """The repository's k8s/crds, found upwards from ``start``."""
    for parent in [start, *start.resolve().parents]:
        if (parent / "k8s" / "crds").is_dir():
            return parent / "k8s" / "crds"
    raise FileNotFoundError(f"no k8s/crds above {start}")
