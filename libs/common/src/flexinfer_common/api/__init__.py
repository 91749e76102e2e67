"""FlexInfer API types (group ``ai.flexinfer``): the single source of the CRD schemas."""

from flexinfer_common.api.duration import Duration, format_duration, parse_duration
from flexinfer_common.api.lora import (
    LORA_FINALIZER,
    LORA_KIND,
    LoRAAdapter,
    LoRAAdapterPhase,
    LoRAAdapterSpec,
    LoRAAdapterStatus,
    LoRASource,
    LoRASourceType,
)
from flexinfer_common.api.meta import Condition, ObjectMeta
from flexinfer_common.api.model import (
    API_GROUP,
    API_VERSION,
    CacheSpec,
    GPUSpec,
    LiteLLMSpec,
    Model,
    ModelSpec,
    ServerlessSpec,
)
from flexinfer_common.api.status import ModelPhase, ModelStatus

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "LORA_FINALIZER",
    "LORA_KIND",
    "CacheSpec",
    "Condition",
    "Duration",
    "GPUSpec",
    "LiteLLMSpec",
    "LoRAAdapter",
    "LoRAAdapterPhase",
    "LoRAAdapterSpec",
    "LoRAAdapterStatus",
    "LoRASource",
    "LoRASourceType",
    "Model",
    "ModelPhase",
    "ModelSpec",
    "ModelStatus",
    "ObjectMeta",
    "ServerlessSpec",
    "format_duration",
    "parse_duration",
]
