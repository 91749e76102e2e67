"""Pick a provider for a model: by URL scheme first, then by the proto ``ModelProvider`` enum.

A model name like ``s3://bucket/prefix``, ``gs://bucket/prefix`` or ``oci://host/repo:tag``
selects its provider
whatever enum the client sent (ModelExpress clients often leave it at HUGGING_FACE = 0);
plain names (``org/model``) use the enum: HUGGING_FACE=0, NGC=1, GCS=2, S3=3.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from flexinfer_common.errors import InvalidSpecError
from flexinfer_registry.core.providers.base import ModelProvider, ProviderConfig

ProviderFactory = Callable[[ProviderConfig], ModelProvider]

PROTO_ENUM: Mapping[int, str] = {0: "huggingface", 1: "ngc", 2: "gcs", 3: "s3"}
"""``model_express.model.ModelProvider`` value -> provider name."""

ENUM_OF: Mapping[str, int] = {name: value for value, name in PROTO_ENUM.items()}
"""Provider name -> proto enum value (the file and OCI providers, which the enum cannot
name, report as HUGGING_FACE = 0; their names' URL schemes pick them)."""

SCHEMES: Mapping[str, str] = {
    "file": "file",
    "s3": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "ngc": "ngc",
    "hf": "huggingface",
    "oci": "oci",
}
"""URL scheme -> provider name."""


def scheme_of(model_name: str) -> str | None:
    """The URL scheme of ``model_name`` (lower case), or None for a plain model id."""
    head, sep, _ = model_name.partition("://")
    return head.lower() if sep and head.isalnum() else None


@dataclass
class ProviderRegistry:
    """Name -> factory; builds each provider once and hands out the same instance.

    The built-in factories live with their implementations, outside the core
    (:func:`flexinfer_registry.adapters.providers.builtin_providers`)."""

    config: ProviderConfig = field(default_factory=ProviderConfig)
    factories: dict[str, ProviderFactory] = field(default_factory=dict)
    _built: dict[str, ModelProvider] = field(default_factory=dict, init=False, repr=False)

    def register(self, name: str, factory: ProviderFactory) -> None:
        """Add or replace the factory for ``name`` (tests and plugins)."""
        self.factories[name] = factory
        self._built.pop(name, None)

    def get(self, name: str) -> ModelProvider:
        """The provider called ``name``; InvalidSpecError for an unknown one."""
        if name not in self._built:
            factory = self.factories.get(name)
            if factory is None:
                known = ", ".join(sorted(self.factories))
                raise InvalidSpecError(
                    f"unknown provider {name[:40]!r}; known: {known}", field="provider"
                )
            self._built[name] = factory(self.config)
        return self._built[name]

    def name_for(self, model_name: str, provider_enum: int = 0) -> str:
        """The provider name ``provider_for`` would pick."""
        scheme = scheme_of(model_name)
        if scheme is not None:
            if scheme not in SCHEMES:
                known = ", ".join(f"{s}://" for s in sorted(SCHEMES))
                raise InvalidSpecError(
                    f"unsupported URL scheme {scheme[:20]!r}:// in model name; known: {known}",
                    field="model_name",
                )
            return SCHEMES[scheme]
        if provider_enum not in PROTO_ENUM:
            raise InvalidSpecError(
                f"unknown ModelProvider value {provider_enum}; known: "
                + ", ".join(f"{v}={n}" for v, n in PROTO_ENUM.items()),
                field="provider",
            )
        return PROTO_ENUM[provider_enum]

    def provider_for(self, model_name: str, provider_enum: int = 0) -> ModelProvider:
        """The provider for ``model_name``: its URL scheme wins, else the proto enum value."""
        return self.get(self.name_for(model_name, provider_enum))
