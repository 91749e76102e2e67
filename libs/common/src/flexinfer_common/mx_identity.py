"""SourceIdentity and ``mx_source_id``: one P2P source's identity, as ModelExpress defines it.

The registry names sources by it and workers (libs/transfer) compute it where no registry
answers (the k8s-service backend) and to check a manifest's source id, so both take it
from here. ``mx_source_id`` is the first 16 hex digits of SHA-256 over the canonical JSON
of the identity, byte for byte as modelexpress's ``compute_mx_source_id``: strings
lowercased, ``extra_parameters`` sorted by key then lowercased with the first of
case-colliding keys kept, the optional compatibility fields only when set, keys sorted, no
spaces. The wire message is converted at each side's gRPC edge.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

OPTIONAL_FIELDS = (
    "backend_framework_version",
    "torch_version",
    "cuda_version",
    "triton_version",
    "gpu_arch",
    "compile_config_digest",
)
"""Hashed only when set, so weight sources' ids stay what they were before these fields."""


@dataclass(frozen=True)
class SourceIdentity:
    """The fields of ``model_express.p2p.SourceIdentity``, exactly as sent (not lowercased):
    everything that makes two sources' bytes interchangeable."""

    mx_version: str = ""
    mx_source_type: int = 0
    model_name: str = ""
    backend_framework: int = 0
    tensor_parallel_size: int = 0
    pipeline_parallel_size: int = 0
    expert_parallel_size: int = 0
    dtype: str = ""
    quantization: str = ""
    extra_parameters: dict[str, str] = field(default_factory=dict)
    revision: str = ""
    backend_framework_version: str = ""
    torch_version: str = ""
    cuda_version: str = ""
    triton_version: str = ""
    gpu_arch: str = ""
    compile_config_digest: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict of every field (for stores that persist JSON)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SourceIdentity:
        """The inverse of :meth:`to_dict`; unknown keys are ignored (forward compatibility)."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        values["extra_parameters"] = dict(values.get("extra_parameters") or {})
        return cls(**values)

    @property
    def mx_source_id(self) -> str:
        """This identity's source id."""
        return compute_mx_source_id(self)


def canonical_json(identity: SourceIdentity) -> str:
    """The canonical JSON the source id hashes (see the module docstring)."""
    extra: dict[str, str] = {}
    for key, value in sorted(identity.extra_parameters.items()):
        extra.setdefault(key.lower(), value.lower())
    payload: dict[str, object] = {
        "mx_version": identity.mx_version.lower(),
        "mx_source_type": identity.mx_source_type,
        "model_name": identity.model_name.lower(),
        "backend_framework": identity.backend_framework,
        "tensor_parallel_size": identity.tensor_parallel_size,
        "pipeline_parallel_size": identity.pipeline_parallel_size,
        "expert_parallel_size": identity.expert_parallel_size,
        "dtype": identity.dtype.lower(),
        "quantization": identity.quantization.lower(),
        "extra_parameters": extra,
        "revision": identity.revision.lower(),
    }
    for name in OPTIONAL_FIELDS:
        value = getattr(identity, name)
        if value:
            payload[name] = value.lower()
    return json.dumps(payload, separators=(",", ":"), sort_keys=True)


def compute_mx_source_id(identity: SourceIdentity) -> str:
    """16 lower-case hex digits identifying the source (see the module docstring)."""
    return hashlib.sha256(canonical_json(identity).encode()).hexdigest()[:16]
