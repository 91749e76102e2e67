"""Registry addresses the client dials: cleartext only, and never an ``https://`` one in the
clear."""

from __future__ import annotations

import grpc

from flexinfer_registry.client.errors import CallError


class TlsNotSupportedError(CallError):
    """An ``https://`` (or ``grpcs://``) address: this client speaks only cleartext HTTP/2,
    and refuses rather than send the call, its token and the model in the clear."""

    def __init__(self, address: str) -> None:
        super().__init__(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"refusing {address[:200]!r}: TLS is not supported by this client, and it would "
            "send the call in cleartext; use http://host:port (or host:port) for a cleartext "
            "registry, or reach a TLS one through a local TLS proxy",
        )


CLEARTEXT_SCHEMES = ("http://", "grpc://")
TLS_SCHEMES = ("https://", "grpcs://")


def cleartext_address(address: str) -> str:
    """``host:port`` (or ``unix:path``) of ``address``, an ``http://``/``grpc://`` prefix
    dropped; TlsNotSupportedError for ``https://`` or ``grpcs://``."""
    lowered = address.strip().lower()
    if lowered.startswith(TLS_SCHEMES):
        raise TlsNotSupportedError(address)
    plain = address.strip()
    for scheme in CLEARTEXT_SCHEMES:
        if lowered.startswith(scheme):
            plain = plain[len(scheme) :]
    return plain.rstrip("/")
