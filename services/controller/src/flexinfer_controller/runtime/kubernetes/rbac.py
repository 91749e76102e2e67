"""The API access the controller needs, as (API group, resource, verbs): least privilege.

This table is what k8s/base/rbac.yaml grants the controller's ClusterRole, no more; a test
derives the same set from the code (the adapters' client calls and the runtime's plan), so
a new call fails the test until the table, and then the manifest, grant it.
``models/finalizers`` and ``modelcaches/finalizers`` update is what the apiserver's
OwnerReferencesPermissionEnforcement checks for owner references with ``blockOwnerDeletion``.
ModelDeployments (v1alpha1) are only read, watched, finalized and given a status by the
bridge, never created or deleted: their rows are taken from the calls of a bridge run
against the fake apiserver, and so are the GPUGroup loop's (``gpugroups``: listed, watched,
given a status).
"""

from __future__ import annotations

_CRUD = frozenset({"get", "list", "watch", "create", "patch", "delete"})

RULES: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("ai.flexinfer", "models", _CRUD),
    ("ai.flexinfer", "loraadapters", _CRUD),
    ("ai.flexinfer", "modelcatalogs", _CRUD),
    ("ai.flexinfer", "models/status", frozenset({"patch"})),
    ("ai.flexinfer", "loraadapters/status", frozenset({"patch"})),
    ("ai.flexinfer", "modelcatalogs/status", frozenset({"patch"})),
    ("ai.flexinfer", "models/finalizers", frozenset({"update"})),
    ("ai.flexinfer", "modeldeployments", frozenset({"get", "list", "watch", "patch"})),
    ("ai.flexinfer", "modeldeployments/status", frozenset({"patch"})),
    # Legacy ModelCaches: read through informers; only their status is written.
    ("ai.flexinfer", "modelcaches", frozenset({"list", "watch"})),
    ("ai.flexinfer", "modelcaches/status", frozenset({"patch"})),
    ("ai.flexinfer", "modelcaches/finalizers", frozenset({"update"})),
    # GPUGroups: read through informers (members, policy, the proxies' queue annotations);
    # only their status is written.
    ("ai.flexinfer", "gpugroups", frozenset({"list", "watch"})),
    ("ai.flexinfer", "gpugroups/status", frozenset({"patch"})),
    ("", "configmaps", frozenset({"get", "list", "create", "update", "patch", "delete"})),
    ("", "secrets", frozenset({"get"})),  # ModelCatalog registries' secretRef
    ("", "services", frozenset({"get", "create", "update", "delete"})),
    # delete: a deleted ModelCache's own PVC (not every apiserver garbage-collects);
    # patch: its storage request raised to a grown spec.storageSize.
    ("", "persistentvolumeclaims", frozenset({"get", "create", "patch", "delete"})),
    # list: also a ModelCache's finished Job's pods, for their termination message.
    ("", "pods", frozenset({"list", "watch", "patch", "delete"})),
    ("", "nodes", frozenset({"list", "watch"})),
    ("", "events", frozenset({"create", "patch"})),  # Events on the Model; patch: a repeat
    ("apps", "deployments", frozenset({"get", "create", "update", "patch", "delete"})),
    # list: a ModelCache's Jobs, by label (old specs' and gone nodes' Jobs are deleted).
    ("batch", "jobs", frozenset({"get", "list", "create", "delete"})),
    ("policy", "poddisruptionbudgets", frozenset({"get", "create", "update", "delete"})),
)  # fmt: skip


BRIDGED = frozenset({"modeldeployments", "modeldeployments/status"})
"""The resources whose rows the bridge's calls give (not the adapters' static scan)."""
GROUPED = frozenset({"gpugroups", "gpugroups/status"})
"""The resources whose rows the GPUGroup loop's calls give (it goes through the generic
custom-object helpers, which the static scan would grant every verb of)."""


def grants() -> set[tuple[str, str, str]]:
    """The table as (group, resource, verb) triples."""
    return {(group, resource, verb) for group, resource, verbs in RULES for verb in verbs}
