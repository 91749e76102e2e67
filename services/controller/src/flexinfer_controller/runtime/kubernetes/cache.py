"""Where a Model's weights live on the cluster: the cache plan, and the PVC it may need.

The plan follows spec.source and spec.cache (strategy ``Memory`` when gpu.shared is set,
else ``SharedPVC``; reference §1.4):

* ``file:///dir``: the node's directory, mounted read-only; nothing is fetched;
* ``pvc://claim/path``: an existing claim; nothing is fetched or created;
* a registry source (hf://, s3://, gs://, ngc://, oci://): a PVC (``SharedPVC``, ``Memory``)
  or the node's ``hostPath/<ns>/<model>`` (``Local``), filled by the prefetch Job; with
  ``None`` there is no cache and the engine is given the model's identifier;
* a backend that pulls its model itself (Ollama) gets no volume.

The prefetch Job downloads with the registry client's DirectOnly fallback layout,
``<cache>/<provider>/<name>``, so that is where the engine is pointed.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from flexinfer_common.api import Model
from flexinfer_common.errors import InvalidSpecError
from flexinfer_controller.backends.render import model_ref
from flexinfer_controller.runtime.kubernetes.names import (
    CACHE_LABEL,
    CACHE_PVC_ANNOTATION,
    SOURCE_ANNOTATION,
    Obj,
    labels,
    metadata,
    object_name,
)

PROVIDERS = {"hf": "huggingface", "s3": "s3", "gs": "gcs", "gcs": "gcs", "ngc": "ngc", "oci": "oci"}
"""Registry source schemes -> the registry's provider names (its cache's first directory)."""


@dataclass(frozen=True)
class Fetch:
    """What the prefetch Job asks the registry for."""

    name: str
    """The model name the registry client gets (``org/model``, or the whole URI)."""
    provider: str | None
    """``--provider`` for a bare ``org/model`` name; None: the URI's scheme decides."""
    subpath: str
    """Where the download lands inside the cache volume."""


@dataclass(frozen=True)
class CachePlan:
    """The volume the weights are on, and how they get there."""

    strategy: str
    claim: str | None = None
    create_claim: bool = False
    host_path: str | None = None
    subpath: str = ""
    fetch: Fetch | None = None
    read_only: bool = True

    @property
    def has_volume(self) -> bool:
        """Whether a cache volume is mounted at all."""
        return self.claim is not None or self.host_path is not None


def strategy(model: Model) -> str:
    """spec.cache.strategy, else Memory for a shared GPU, else SharedPVC."""
    cache = model.spec.cache
    if cache and cache.strategy:
        return cache.strategy
    shared = model.spec.gpu.shared if model.spec.gpu else None
    return "Memory" if shared else "SharedPVC"


def fetch_for(source: str) -> Fetch:
    """The registry request for a registry source, and where it lands."""
    scheme = urlsplit(source).scheme.lower()
    provider = PROVIDERS[scheme]
    ref = model_ref(source)
    plain = [p for p in ref.replace(":", "/").split("/") if p not in ("", ".", "..")]
    subpath = "/".join([provider, *plain])
    if scheme == "hf":
        return Fetch(ref, "hf", subpath)
    return Fetch(f"{scheme}://{ref}", None, subpath)


def plan(model: Model, needs_volume: bool) -> CachePlan:
    """The cache plan of ``model`` (InvalidSpecError for a source no cache can hold)."""
    chosen = strategy(model)
    parts = urlsplit(model.spec.source)
    scheme = parts.scheme.lower()
    if not needs_volume or scheme == "ollama":
        return CachePlan("None")
    if scheme == "file":
        return CachePlan(chosen, host_path=parts.path)
    if scheme == "pvc":
        return CachePlan(chosen, claim=parts.netloc, subpath=parts.path.strip("/"))
    if scheme not in PROVIDERS:
        known = ", ".join(f"{s}://" for s in ("file", "pvc", "ollama", *PROVIDERS))
        raise InvalidSpecError(f"spec.source scheme {scheme}:// is not one of {known}")
    if chosen == "None":
        return CachePlan("None")
    fetch = fetch_for(model.spec.source)
    cache = model.spec.cache
    if chosen == "Local":
        root = (cache.host_path if cache else "/var/lib/flexinfer/models").rstrip("/")
        host = f"{root}/{model.metadata.namespace}/{model.metadata.name}"
        return CachePlan(chosen, host_path=host, subpath=fetch.subpath, fetch=fetch)
    claim = (cache.pvc_name if cache else None) or object_name(model.metadata.name, "cache")
    create = not (cache and cache.pvc_name)
    return CachePlan(chosen, claim=claim, create_claim=create, subpath=fetch.subpath, fetch=fetch)


def persistent_volume_claim(model: Model, backend: str, cache: CachePlan) -> Obj | None:
    """The model cache PVC the controller creates (None when it uses an existing one)."""
    if not cache.create_claim or cache.claim is None:
        return None
    spec = model.spec.cache
    obj_labels = labels(model, backend, "cache") | {CACHE_LABEL: cache.strategy}
    notes = {SOURCE_ANNOTATION: model.spec.source, CACHE_PVC_ANNOTATION: cache.claim}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(model, cache.claim, obj_labels, notes),
        "spec": claim_spec(
            spec.storage_class if spec else "longhorn", spec.size if spec else "50Gi"
        ),
    }


def claim_spec(storage_class: str | None, size: str) -> Obj:
    """A cache PVC's spec (no storageClassName with ``storage_class`` None: the default)."""
    # Every replica (on any node) and the prefetch Job mount the same claim.
    spec: Obj = {"accessModes": ["ReadWriteMany"]}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    spec["resources"] = {"requests": {"storage": size}}
    return spec


def check_quantize_has_cache(model: Model, cache: CachePlan) -> None:
    """spec.quantize converts cached weights: without a cache there is nothing to convert."""
    if model.spec.quantize and cache.fetch is None:
        raise InvalidSpecError(
            "spec.quantize needs weights the controller caches (an hf://, s3://, gs://, ngc:// "
            "or oci:// source with a cache strategy other than None)",
            field="spec.quantize",
        )
