"""What a ModelCache needs on the cluster: its storage, its download Jobs, where the files go.

* ``SharedPVC`` (and ``Auto``, which the operator resolves to a shared PVC when nothing
  else is said): the PVC ``<cache>-cache`` (storageSize, clusterStorageClassName), or
  ``existingClaimName`` as it is; the model goes in the subdirectory ``modelPath``
  (default: the cache's name), filled by one prefetch Job;
* ``NodeLocal``: ``hostPath`` (default /var/lib/flexinfer/models) ``/<modelPath>`` on every
  node ``nodeSelector`` matches (default nvidia.com/gpu.present=true), one Job per node;
* ``Ephemeral``: nothing to create or fill (each pod gets an emptyDir).

The Jobs are the Model prefetch Job's pieces (``runtime.kubernetes.jobs``): the registry
client downloads into ``<mount>/<modelPath>``, laid out as ``<provider>/<name>``, and
writes the bytes it fetched to its termination message (``status.sizeBytes``). With
``ociRegistrySecretRef`` the Secret's docker config is mounted where the registry client's
OCI provider reads credentials, and an ``oci://`` source is fetched by the Job itself. A
Job's name hashes its container, pod and volumes, so a spec change gets a new Job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from flexinfer_common.api import API_VERSION_V1ALPHA1, ModelCache
from flexinfer_common.api.modelcache import DEFAULT_HOST_PATH
from flexinfer_controller.backends.base import SecretKeyRef
from flexinfer_controller.backends.render import model_ref
from flexinfer_controller.core.sources import REMOTE_SCHEMES
from flexinfer_controller.flashload.render import CACHE_VOLUME
from flexinfer_controller.runtime.kubernetes import jobs
from flexinfer_controller.runtime.kubernetes.cache import Fetch, claim_spec, fetch_for
from flexinfer_controller.runtime.kubernetes.names import (
    CACHE_KIND_ANNOTATION,
    CACHE_PATH_ANNOTATION,
    COMPONENT_LABEL,
    MANAGED_BY,
    PART_OF,
    SOURCE_ANNOTATION,
    Obj,
    label_value,
    object_name,
)
from flexinfer_controller.runtime.kubernetes.options import MODEL_MOUNT

CACHE_LABEL = "flexinfer.ai/modelcache"
"""On everything made for a ModelCache: its name (as a label value); selects its Jobs."""
CACHE_KEY_ANNOTATION = "flexinfer.ai/modelcache-key"
"""``namespace/name`` of the ModelCache, whole (a label value may be cut and hashed)."""
NODE_LABEL = "flexinfer.ai/node"
NODE_ANNOTATION = "flexinfer.ai/node-name"
DEFAULT_NODE_SELECTOR = {"nvidia.com/gpu.present": "true"}
TERMINATION_LOG = "/dev/termination-log"
"""Where the prefetch container writes ``{"sizeBytes": N}`` (the pod's termination message)."""
OCI_AUTH_SETTING = "FLEXINFER_REGISTRY_OCI_AUTH_FILE"
"""The registry's setting naming a docker config.json of OCI credentials."""
OCI_AUTH_VOLUME = "oci-auth"
OCI_AUTH_DIR = "/var/run/flexinfer/oci-auth"
OCI_AUTH_FILE = f"{OCI_AUTH_DIR}/config.json"
DOCKER_CONFIG_KEY = ".dockerconfigjson"
"""The key of a ``kubernetes.io/dockerconfigjson`` Secret."""
SCHEME_ALIASES = {"huggingface": "hf"}
"""The operator's spellings of a scheme the registry knows by another name."""
SUPPORTED_SCHEMES = ("huggingface", *sorted(REMOTE_SCHEMES))
_SEGMENT = re.compile(r"^[A-Za-z0-9._-]+$")


class CacheSpecError(Exception):
    """A spec no Job can serve as written (permanent: written to status, not retried)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class JobOptions:
    """The controller's side of the Jobs: the registry client's image and address."""

    registry_image: str
    registry_address: str
    mount: str = MODEL_MOUNT
    token: SecretKeyRef | None = None
    """The Secret key the download Job reads the registry's fetch token from."""


@dataclass(frozen=True)
class CachePlan:
    """Where a ModelCache's files go and what fetches them."""

    cache: ModelCache
    strategy: str
    """SharedPVC, NodeLocal or Ephemeral (Auto resolved)."""
    directory: str = ""
    """modelPath: the subdirectory of the volume the download goes in."""
    claim: str | None = None
    create_claim: bool = False
    host_path: str | None = None
    fetch: Fetch | None = None

    @property
    def path(self) -> str | None:
        """Where the files are, as a Model's spec.source would name them (None: nowhere)."""
        if self.fetch is None:
            return None
        inner = f"{self.directory}/{self.fetch.subpath}"
        if self.claim is not None:
            return f"pvc://{self.claim}/{inner}"
        return f"file://{self.host_path}/{inner}"

    @property
    def node_selector(self) -> dict[str, str]:
        """The nodes a NodeLocal cache fills."""
        return dict(self.cache.spec.node_selector or DEFAULT_NODE_SELECTOR)


def cache_key(cache: ModelCache) -> str:
    """``namespace/name`` of ``cache``."""
    return f"{cache.metadata.namespace}/{cache.metadata.name}"


def strategy(cache: ModelCache) -> str:
    """spec.storageStrategy with Auto resolved; CacheSpecError for one nobody knows."""
    chosen = cache.spec.storage_strategy
    if chosen == "Auto":
        return "SharedPVC"
    if chosen not in ("SharedPVC", "NodeLocal", "Ephemeral"):
        raise CacheSpecError(
            "UnsupportedStrategy",
            f"spec.storageStrategy {chosen!r} is not one of Auto, SharedPVC, NodeLocal, Ephemeral",
        )
    return chosen


def fetch_of(source: str) -> Fetch:
    """The registry request for spec.source; CacheSpecError for a scheme it cannot fetch."""
    scheme = urlsplit(source).scheme.lower()
    scheme = SCHEME_ALIASES.get(scheme, scheme)
    if scheme not in REMOTE_SCHEMES:
        known = ", ".join(f"{s}://" for s in SUPPORTED_SCHEMES)
        raise CacheSpecError(
            "UnsupportedSource",
            f"spec.source scheme {urlsplit(source).scheme}:// cannot be fetched by the registry; "
            f"supported: {known} (any case)",
        )
    ref = model_ref(source)
    if not ref:
        raise CacheSpecError("InvalidSource", f"spec.source {source!r} names no model")
    return fetch_for(f"{scheme}://{ref}")


def directory(cache: ModelCache) -> str:
    """spec.modelPath (default: the cache's name), checked to stay inside the volume."""
    raw = cache.spec.model_path or cache.metadata.name
    parts = raw.strip("/").split("/")
    if raw.startswith("/") or any(p in ("", ".", "..") or not _SEGMENT.match(p) for p in parts):
        raise CacheSpecError(
            "InvalidModelPath",
            f"spec.modelPath {raw!r} must be a relative path of letters, digits, '.', '_' "
            "and '-' segments, without '.' or '..'",
        )
    return "/".join(parts)


def plan(cache: ModelCache) -> CachePlan:
    """The plan of ``cache``; CacheSpecError when its spec cannot be served."""
    chosen = strategy(cache)
    if chosen == "Ephemeral":
        return CachePlan(cache, chosen)
    fetch, subdir = fetch_of(cache.spec.source), directory(cache)
    if chosen == "NodeLocal":
        host = (cache.spec.host_path or DEFAULT_HOST_PATH).rstrip("/") or "/"
        return CachePlan(cache, chosen, subdir, host_path=host, fetch=fetch)
    existing = cache.spec.existing_claim_name
    claim = existing or object_name(cache.metadata.name, "cache")
    return CachePlan(cache, chosen, subdir, claim=claim, create_claim=not existing, fetch=fetch)


def owner_reference(cache: ModelCache) -> Obj:
    """The ModelCache as controlling owner: garbage collection follows it once it is gone."""
    return {
        "apiVersion": API_VERSION_V1ALPHA1,
        "kind": "ModelCache",
        "name": cache.metadata.name,
        "uid": cache.metadata.uid or "",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def cache_labels(cache: ModelCache, component: str) -> dict[str, str]:
    """The labels of what is made for ``cache`` (``flexinfer.ai/modelcache`` selects them)."""
    return {
        CACHE_LABEL: label_value(cache.metadata.name),
        COMPONENT_LABEL: component,
        MANAGED_BY[0]: MANAGED_BY[1],
        PART_OF[0]: PART_OF[1],
    }


def _metadata(cache: ModelCache, name: str, obj_labels: dict[str, str], notes: Obj) -> Obj:
    return {
        "name": name,
        "namespace": cache.metadata.namespace,
        "labels": obj_labels,
        "annotations": {CACHE_KEY_ANNOTATION: cache_key(cache), **notes},
        "ownerReferences": [owner_reference(cache)],
    }


def claim_object(plan: CachePlan) -> Obj | None:
    """The PVC the controller creates (None: an existing claim, a node path or none)."""
    if not plan.create_claim or plan.claim is None:
        return None
    spec = plan.cache.spec
    notes = {SOURCE_ANNOTATION: spec.source}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(plan.cache, plan.claim, cache_labels(plan.cache, "cache"), notes),
        "spec": claim_spec(spec.cluster_storage_class_name, spec.storage_size),
    }


def _container(plan: CachePlan, options: JobOptions) -> Obj:
    assert plan.fetch is not None
    spec = plan.cache.spec
    mount = {"name": CACHE_VOLUME, "mountPath": options.mount}
    cache_dir = f"{options.mount}/{plan.directory}"
    # Private OCI credentials are the cache's own: this container uses them itself rather
    # than have the shared registry fetch (and then serve to anyone) what they unlock.
    private_oci = bool(spec.oci_registry_secret_ref) and plan.fetch.name.startswith("oci://")
    container = jobs.prefetch_container(
        plan.fetch, options.registry_image, options.registry_address, mount, cache_dir,
        strategy="DirectOnly" if private_oci else "SmartFallback", token=options.token,
    )  # fmt: skip
    # The bytes fetched, for status.sizeBytes: the kubelet puts the file in the pod status.
    container["args"] += ["--termination-log", TERMINATION_LOG]
    if spec.secret_ref:
        token = {"secretKeyRef": {"name": spec.secret_ref, "key": "HF_TOKEN"}}
        container["env"].append({"name": "HF_TOKEN", "valueFrom": token})
    if spec.oci_registry_secret_ref:
        container["env"].append({"name": OCI_AUTH_SETTING, "value": OCI_AUTH_FILE})
        container["volumeMounts"].append(
            {"name": OCI_AUTH_VOLUME, "mountPath": OCI_AUTH_DIR, "readOnly": True}
        )
    return container


def _oci_auth_volume(cache: ModelCache) -> list[Obj]:
    """spec.ociRegistrySecretRef's docker config, as the file the registry client reads."""
    secret = cache.spec.oci_registry_secret_ref
    if not secret:
        return []
    items = [{"key": DOCKER_CONFIG_KEY, "path": OCI_AUTH_FILE.rsplit("/", 1)[1]}]
    # Readable by the pod's fsGroup (the Job's non-root user), no one else.
    source = {"secretName": secret, "items": items, "defaultMode": 0o440}
    return [{"name": OCI_AUTH_VOLUME, "secret": source}]


def download_job(plan: CachePlan, options: JobOptions, node: str | None = None) -> Obj:
    """The Job running the registry client into the cache volume (on ``node`` if given)."""
    assert plan.fetch is not None  # Ephemeral caches have no Job
    container = _container(plan, options)
    pod = jobs.prefetch_pod()
    job_labels = cache_labels(plan.cache, "prefetch")
    notes = {
        SOURCE_ANNOTATION: plan.cache.spec.source,
        CACHE_KIND_ANNOTATION: plan.strategy,
        CACHE_PATH_ANNOTATION: f"{plan.directory}/{plan.fetch.subpath}",
    }
    if node is not None:
        pod["nodeName"] = node  # pinned: the files are for this node's disk
        job_labels[NODE_LABEL] = label_value(node)
        notes[NODE_ANNOTATION] = node
    volumes = [jobs.cache_volume(plan.claim, plan.host_path), *_oci_auth_volume(plan.cache)]
    name = jobs.job_name(plan.cache.metadata.name, "prefetch", container, pod, *volumes)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(plan.cache, name, job_labels, notes),
        "spec": jobs.job_spec(job_labels, container, pod, *volumes),
    }


def download_jobs(plan: CachePlan, options: JobOptions, nodes: list[str]) -> list[Obj]:
    """Every Job the cache needs now: one (SharedPVC), one per node (NodeLocal), or none."""
    if plan.fetch is None:
        return []
    if plan.strategy == "NodeLocal":
        return [download_job(plan, options, node) for node in sorted(nodes)]
    return [download_job(plan, options)]


def job_node(job: Obj) -> str | None:
    """The node a NodeLocal Job fills (None for a SharedPVC Job)."""
    notes = job.get("metadata", {}).get("annotations") or {}
    node = notes.get(NODE_ANNOTATION)
    return str(node) if node is not None else None


def owned_by(obj: Obj, cache_key: str) -> bool:
    """Whether ``obj`` was made for the ModelCache ``cache_key`` (namespace/name)."""
    notes = obj.get("metadata", {}).get("annotations") or {}
    return bool(notes.get(CACHE_KEY_ANNOTATION) == cache_key)
