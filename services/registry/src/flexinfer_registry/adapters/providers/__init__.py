"""The built-in providers (file, Hugging Face, S3, GCS, NGC, OCI), one per sibling module.

Each is imported only when first used, so the registry starts without boto3 or
huggingface_hub loaded; :func:`default_factories` is what the app registers in the core's
:class:`~flexinfer_registry.core.providers.registry.ProviderRegistry`.
"""

from __future__ import annotations

from flexinfer_registry.core.providers.base import ModelProvider, ProviderConfig
from flexinfer_registry.core.providers.registry import ProviderFactory, ProviderRegistry


def _file_factory(config: ProviderConfig) -> ModelProvider:
    from flexinfer_registry.adapters.providers.local import LocalProvider

    return LocalProvider(config)


def _hf_factory(config: ProviderConfig) -> ModelProvider:
    from flexinfer_registry.adapters.providers.huggingface import HuggingFaceProvider

    return HuggingFaceProvider(config)


def _s3_factory(config: ProviderConfig) -> ModelProvider:
    from flexinfer_registry.adapters.providers.s3 import S3Provider

    return S3Provider(config)


def _gcs_factory(config: ProviderConfig) -> ModelProvider:
    from flexinfer_registry.adapters.providers.gcs import GcsProvider

    return GcsProvider(config)


def _ngc_factory(config: ProviderConfig) -> ModelProvider:
    from flexinfer_registry.adapters.providers.ngc import NgcProvider

    return NgcProvider(config)


def _oci_factory(config: ProviderConfig) -> ModelProvider:
    from flexinfer_registry.adapters.providers.oci import OciProvider

    return OciProvider(config)


def default_factories() -> dict[str, ProviderFactory]:
    """The built-in providers by name; implementations are imported on first use."""
    return {
        "file": _file_factory,
        "huggingface": _hf_factory,
        "s3": _s3_factory,
        "gcs": _gcs_factory,
        "ngc": _ngc_factory,
        "oci": _oci_factory,
    }


def builtin_providers(config: ProviderConfig | None = None) -> ProviderRegistry:
    """A provider registry holding every built-in provider, configured with ``config``."""
    return ProviderRegistry(config or ProviderConfig(), default_factories())
