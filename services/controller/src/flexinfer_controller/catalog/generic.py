"""The generic adapter: any registry that serves the distribution API's ``/v2/_catalog``."""

from __future__ import annotations

from flexinfer_controller.catalog.client import ClientOptions, OciClient
from flexinfer_controller.catalog.reference import RegistryLocation, check_repository
from flexinfer_controller.catalog.types import RegistrySource


def under_prefix(repositories: list[str], prefix: str) -> list[str]:
    """The repositories at or under ``prefix`` (all of them when it is empty)."""
    if not prefix:
        return list(repositories)
    return [r for r in repositories if r == prefix or r.startswith(prefix + "/")]


class DistributionAdapter:
    """Lists ``/v2/_catalog`` (paginated), limited to the URL's prefix."""

    name = "generic"
    catalog_page_size = 100

    def __init__(
        self, source: RegistrySource, location: RegistryLocation, options: ClientOptions
    ) -> None:
        self.source = source
        self.location = location
        self.credentials = (
            source.credentials.for_registry(location.registry) if source.credentials else None
        )
        self.client = self._client(options)

    def _client(self, options: ClientOptions) -> OciClient:
        return OciClient(self.location, self.credentials, options=options)

    def named_repositories(self) -> list[str]:
        """The repositories the source names explicitly, validated."""
        return [check_repository(name) for name in self.source.repositories]

    async def list_repositories(self) -> list[str]:
        """Named repositories, else the catalog under the URL's prefix."""
        if named := self.named_repositories():
            return named
        repositories = await self.client.catalog(self.catalog_page_size)
        return under_prefix(repositories, self.location.prefix)

    async def aclose(self) -> None:
        """Release the connections."""
        await self.client.aclose()
