"""SourceIdentity and ``mx_source_id``, as the registry and modelexpress compute them.

``mx_source_id`` is the first 16 hex digits of SHA-256 over the canonical JSON of the
identity: strings lowercased, ``extra_parameters`` sorted by key then lowercased with the
first of case-colliding keys kept, the optional compatibility fields only when set, keys
sorted, no spaces. A worker computes it itself where no registry answers it (the
k8s-service backend) and to validate a manifest's source id; the tests hold it equal to
the registry's and to modelexpress's ``compute_mx_source_id``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field

from flexinfer_transfer._generated import p2p_pb2

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
    """The fields of ``model_express.p2p.SourceIdentity`` (everything that makes two
    sources' bytes interchangeable)."""

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

    def to_proto(self) -> p2p_pb2.SourceIdentity:
        """The wire message."""
        return p2p_pb2.SourceIdentity(**dataclasses.asdict(self))

    @classmethod
    def from_proto(cls, message: p2p_pb2.SourceIdentity) -> SourceIdentity:
        """From the wire message."""
        values = {f.name: getattr(message, f.name) for f in dataclasses.fields(cls)}
        values["extra_parameters"] = dict(message.extra_parameters)
        return cls(**values)

    @property
    def mx_source_id(self) -> str:
        """This identity's source id."""
        return compute_mx_source_id(self)


def canonical_json(identity: SourceIdentity) -> str:
    """The JSON the source id hashes (see the module docstring)."""
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
    """16 lower-case hex digits identifying the source."""
    return hashlib.sha256(canonical_json(identity).encode()).hexdigest()[:16]
