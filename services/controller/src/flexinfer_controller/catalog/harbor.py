"""Harbor: repositories are ``<project>/<name>``; the URL prefix may name a project.

``/v2/_catalog`` answers only system admins and robot accounts with catalog access; for
anyone else Harbor refuses it, and the repositories come from Harbor's own API instead:
``/api/v2.0/projects`` and ``/api/v2.0/projects/{project}/repositories`` (Basic auth,
``page``/``page_size`` pagination with a ``Link: rel="next"`` header). The adapter asks
the catalog first and falls back to the API when it is refused.
"""

from __future__ import annotations

from typing import Any

from flexinfer_common.errors import NotFoundError
from flexinfer_controller.catalog.client import ClientOptions, OciClient
from flexinfer_controller.catalog.errors import RegistryAuthError, RegistryProtocolError
from flexinfer_controller.catalog.generic import DistributionAdapter, under_prefix
from flexinfer_controller.catalog.reference import RegistryLocation, check_repository
from flexinfer_controller.catalog.types import RegistrySource

API = "/api/v2.0"
PAGE_SIZE = 100
MAX_PAGES = 1000


class HarborAdapter(DistributionAdapter):
    """The catalog when it answers, else Harbor's projects and repositories API."""

    name = "harbor"
    api_page_size = PAGE_SIZE

    async def list_repositories(self) -> list[str]:
        """Named repositories, else the catalog, else the Harbor API; under the prefix."""
        if named := self.named_repositories():
            return named
        try:
            repositories = await self.client.catalog(self.catalog_page_size)
        except (RegistryAuthError, NotFoundError):
            repositories = await self._api_repositories()
        return under_prefix(repositories, self.location.prefix)

    async def _api_repositories(self) -> list[str]:
        prefix = self.location.prefix
        if prefix:
            projects = [prefix.split("/", 1)[0]]
        else:
            projects = await self._api_names(f"{API}/projects")
        repositories: list[str] = []
        for project in projects:
            check_repository(project)
            repositories += await self._api_names(f"{API}/projects/{project}/repositories")
        return repositories

    async def _api_names(self, path: str) -> list[str]:
        names: list[str] = []
        for page in range(1, MAX_PAGES + 1):
            params = {"page": str(page), "page_size": str(self.api_page_size)}
            doc, next_link = await self.client.api_json(path, params)
            names += _names(self.location.registry, path, doc)
            if next_link is None or not doc:
                return names
        raise RegistryProtocolError(self.location.registry, f"{path}: too many pages")


def _names(registry: str, path: str, doc: Any) -> list[str]:
    if not isinstance(doc, list) or not all(
        isinstance(item, dict) and isinstance(item.get("name"), str) for item in doc
    ):
        raise RegistryProtocolError(registry, f"{path}: expected a list of objects with names")
    return [item["name"] for item in doc]


async def is_harbor(
    source: RegistrySource, location: RegistryLocation, options: ClientOptions
) -> bool:
    """True when the registry answers Harbor's ``/api/v2.0/systeminfo`` with JSON."""
    async with OciClient(location, None, options=options) as client:
        try:
            doc, _ = await client.api_json(f"{API}/systeminfo", {})
        except (NotFoundError, RegistryAuthError, RegistryProtocolError):
            return False
    return isinstance(doc, dict)
