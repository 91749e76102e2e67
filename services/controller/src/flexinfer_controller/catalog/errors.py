"""Errors of the catalog, subclasses of flexinfer_common.errors."""

from __future__ import annotations

from flexinfer_common.errors import InvalidSpecError, PermanentError, UnavailableError


class InvalidReferenceError(InvalidSpecError):
    """An ``oci://`` reference or registry URL does not follow the distribution grammar."""

    def __init__(self, reference: str, reason: str) -> None:
        # repr() keeps control characters in a hostile reference visible and harmless.
        super().__init__(f"invalid OCI reference {reference!r}: {reason}", field="reference")
        self.reason = reason


class RegistryAuthError(PermanentError):
    """The registry (or its token service) refused our credentials, or demanded others."""

    def __init__(self, registry: str, reason: str) -> None:
        super().__init__(f"registry {registry}: authentication failed: {reason}")
        self.registry = registry
        self.reason = reason


class RegistryProtocolError(PermanentError):
    """The registry answered something the distribution spec does not allow."""

    def __init__(self, registry: str, reason: str) -> None:
        super().__init__(f"registry {registry}: {reason}")
        self.registry = registry
        self.reason = reason


class DigestMismatchError(PermanentError):
    """A manifest's bytes do not hash to the digest the registry or the reference named."""

    def __init__(self, registry: str, what: str, expected: str, actual: str) -> None:
        super().__init__(
            f"registry {registry}: {what}: expected digest {expected}, content hashes to {actual}"
        )
        self.registry = registry
        self.expected = expected
        self.actual = actual


class RegistryUnavailableError(UnavailableError):
    """The registry could not be reached, throttled us, or failed on its side."""

    def __init__(self, registry: str, reason: str, *, delay: float = 1.0) -> None:
        super().__init__(f"registry {registry}: {reason}", delay=delay)
        self.registry = registry
