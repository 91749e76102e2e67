"""FlexInfer API types (group ``ai.flexinfer``): the single source of the CRD schemas."""

from flexinfer_common.api.catalog import (
    CATALOG_KIND,
    ModelCatalog,
    ModelCatalogSpec,
    ModelCatalogStatus,
)
from flexinfer_common.api.conversion import (
    V1ALPHA1_ANNOTATION,
    V1ALPHA2_ANNOTATION,
    to_model,
    to_model_deployment,
)
from flexinfer_common.api.duration import Duration, format_duration, parse_duration
from flexinfer_common.api.gpugroup import GPU_GROUP_KIND, GPUGroup, GPUGroupSpec
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
    API_VERSION_V1ALPHA1,
    MODEL_FINALIZER,
    CacheSpec,
    GPUSpec,
    LiteLLMSpec,
    Model,
    ModelSpec,
    ServerlessSpec,
)
from flexinfer_common.api.modelcache import CACHE_KIND, ModelCache, ModelCacheSpec
from flexinfer_common.api.modeldeployment import (
    DEPLOYMENT_FINALIZER,
    DEPLOYMENT_KIND,
    ModelDeployment,
    ModelDeploymentSpec,
)
from flexinfer_common.api.status import ModelPhase, ModelStatus

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "API_VERSION_V1ALPHA1",
    "CACHE_KIND",
    "CATALOG_KIND",
    "DEPLOYMENT_FINALIZER",
    "DEPLOYMENT_KIND",
    "GPU_GROUP_KIND",
    "LORA_FINALIZER",
    "LORA_KIND",
    "MODEL_FINALIZER",
    "V1ALPHA1_ANNOTATION",
    "V1ALPHA2_ANNOTATION",
    "CacheSpec",
    "Condition",
    "Duration",
    "GPUGroup",
    "GPUGroupSpec",
    "GPUSpec",
    "LiteLLMSpec",
    "LoRAAdapter",
    "LoRAAdapterPhase",
    "LoRAAdapterSpec",
    "LoRAAdapterStatus",
    "LoRASource",
    "LoRASourceType",
    "Model",
    "ModelCache",
    "ModelCacheSpec",
    "ModelCatalog",
    "ModelCatalogSpec",
    "ModelCatalogStatus",
    "ModelDeployment",
    "ModelDeploymentSpec",
    "ModelPhase",
    "ModelSpec",
    "ModelStatus",
    "ObjectMeta",
    "ServerlessSpec",
    "format_duration",
    "parse_duration",
    "to_model",
    "to_model_deployment",
]
