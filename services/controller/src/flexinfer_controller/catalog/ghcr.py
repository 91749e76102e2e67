"""GitHub Container Registry (ghcr.io).

GHCR hands out pull tokens at ``https://ghcr.io/token?scope=repository:<name>:pull``,
anonymously for public packages or with a user and a personal access token (classic,
``read:packages``) from the secret. It has no usable ``/v2/_catalog``, and GitHub
documents listing packages only through its REST API (api.github.com, another service
with its own token), which this adapter does not call. So a GHCR source must name its
repositories: ``oci://ghcr.io/<owner>/<name>`` in the URL, or ``repositories``.
"""

from __future__ import annotations

from flexinfer_common.errors import ConfigError
from flexinfer_controller.catalog.auth import Challenge
from flexinfer_controller.catalog.client import ClientOptions, OciClient
from flexinfer_controller.catalog.generic import DistributionAdapter


class GhcrAdapter(DistributionAdapter):
    """Named repositories only; tokens fetched up front from the known realm."""

    name = "ghcr"

    def _client(self, options: ClientOptions) -> OciClient:
        # The realm is known: skip the 401 round trip that would only name it.
        realm = Challenge(
            "bearer", {"realm": f"{self.location.base_url}/token", "service": self.location.host}
        )
        return OciClient(self.location, self.credentials, options=options, challenge=realm)

    async def list_repositories(self) -> list[str]:
        """The repositories named by the URL path and ``repositories``; nothing is listed."""
        prefix = self.location.prefix
        if prefix and "/" not in prefix:
            raise ConfigError(
                f"{self.source.url} names only the owner {prefix!r}: GHCR cannot list an "
                "owner's packages through the registry API; name each repository "
                "(oci://ghcr.io/<owner>/<name>)"
            )
        named = ([prefix] if prefix else []) + self.named_repositories()
        if not named:
            raise ConfigError(
                f"{self.source.url}: GHCR has no catalog; name a repository in the URL "
                "(oci://ghcr.io/<owner>/<name>) or in repositories"
            )
        return list(dict.fromkeys(named))
