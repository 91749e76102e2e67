"""Amazon ECR (``<account>.dkr.ecr.<region>.amazonaws.com``).

ECR speaks Basic auth with the user ``AWS`` and a password from GetAuthorizationToken.
The controller does not call AWS (boto3 is not one of its dependencies): the secret
carries the token as ECR users make it, ``aws ecr get-login-password`` stored as the
password of user ``AWS`` in a dockerconfigjson (a CronJob or the external-secrets ECR
generator refreshes it, since the token expires after 12 hours). ECR serves
``/v2/_catalog`` but refuses page sizes over 1000.
"""

from __future__ import annotations

from flexinfer_controller.catalog.client import ClientOptions, OciClient
from flexinfer_controller.catalog.errors import RegistryAuthError
from flexinfer_controller.catalog.generic import DistributionAdapter

ECR_HOST_PATTERN = r"[0-9]{12}\.dkr\.ecr(-fips)?\.[a-z0-9-]+\.amazonaws\.com(\.cn)?"


class EcrAdapter(DistributionAdapter):
    """Basic auth up front; auth failures explain the 12-hour token."""

    name = "ecr"
    catalog_page_size = 1000

    def _client(self, options: ClientOptions) -> OciClient:
        return OciClient(self.location, self.credentials, options=options, basic_first=True)

    async def list_repositories(self) -> list[str]:
        """The catalog (or named repositories); auth errors say how to refresh the token."""
        if self.credentials is None or self.credentials.basic is None:
            raise RegistryAuthError(
                self.location.registry,
                "ECR needs the secret to hold user AWS and an `aws ecr get-login-password` token",
            )
        try:
            return await super().list_repositories()
        except RegistryAuthError as exc:
            raise RegistryAuthError(
                exc.registry,
                f"{exc.reason}; ECR tokens expire after 12 hours: refresh the secret",
            ) from exc
