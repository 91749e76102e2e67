"""What every ModelService call checks before it touches the store or the disk.

The name and revision are checked against :mod:`.identity`'s rules and the configured
limits, the provider is picked (an unknown URL scheme or ModelProvider value is refused),
and the provider checks the name itself (a ``file://`` path outside the file roots is
refused, one that does not exist is not found): a refused call leaves no record, no
staging folder and no download behind.
"""

from __future__ import annotations

from flexinfer_registry.core.downloads import ProviderResolver
from flexinfer_registry.core.identity import VISIBLE, Checker, IdentityLimits
from flexinfer_registry.core.providers.base import ModelProvider


class Admission:
    """Checks the model a ModelService request names (see the module docstring)."""

    def __init__(self, providers: ProviderResolver, limits: IdentityLimits) -> None:
        self.providers = providers
        self.limits = limits

    def check_name(self, name: str, revision: str | None = None) -> None:
        """The name and revision (InvalidFieldsError saying which and why)."""
        check = Checker(self.limits)
        check.model_name("model_name", name)
        if revision:
            check.text("revision", revision, VISIBLE)
        check.done()

    async def check_source(
        self, name: str, provider_enum: int, revision: str | None
    ) -> ModelProvider:
        """The name, its provider and the provider's own rules; returns the provider."""
        self.check_name(name, revision)
        provider = self.providers.provider_for(name, provider_enum)
        await provider.check(name)
        return provider
