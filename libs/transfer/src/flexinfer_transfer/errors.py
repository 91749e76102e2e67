"""Errors of peer transfers: what makes the chain try the next source or strategy."""

from __future__ import annotations

from flexinfer_common.errors import PermanentError, TemporaryError


class SourceTransferError(TemporaryError):
    """Pulling weights from one source failed; the next source (or strategy) may work."""


class ManifestMismatchError(PermanentError):
    """Source and target tensor names or sizes differ (e.g. a rolling update with two
    image versions); the receive path turns it into a SourceTransferError."""


class RegistryAuthError(PermanentError):
    """The registry refused this worker's token (UNAUTHENTICATED, PERMISSION_DENIED): no
    retry helps until it is given the registry's P2P token."""
