"""Bearer-token scopes of the registry's gRPC API.

Two scopes: the admin token (``FLEXINFER_REGISTRY_AUTH_TOKEN``) opens every method; the
P2P token (``FLEXINFER_REGISTRY_P2P_TOKEN``) opens only ``model_express.p2p.P2pService``
(PublishMetadata, ListSources, GetMetadata, UpdateStatus), which is all an engine needs
to find peers and publish itself. Engines are handed the P2P token, never the admin one:
a leaked engine token can list and publish sources, not download, stream or delete
models. Health probes need neither.

Refusals: no token, or one matching no scope, is UNAUTHENTICATED; the P2P token on a
method outside its scope is PERMISSION_DENIED (the caller is known, the method is not
theirs), with details naming the scope. Details never carry the token itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Any

import grpc

from flexinfer_common.auth import AdminTokens, AuthenticationError

OPEN_PREFIXES = ("/grpc.health.v1.Health/", "/model_express.health.HealthService/")
"""Probes must work without credentials (kubelet has none)."""

P2P_SERVICE = "model_express.p2p.P2pService"
P2P_PREFIX = f"/{P2P_SERVICE}/"
"""Methods the P2P token opens: the registry's whole P2pService."""

UNAUTHENTICATED_DETAILS = "missing or invalid bearer token"
P2P_DENIED_DETAILS = (
    f"the P2P token authorises {P2P_SERVICE} only; this method needs the admin token"
)


class Scope(Enum):
    """What a call's token opens."""

    NONE = "none"
    P2P = "p2p"
    ADMIN = "admin"


class TokenAuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Requires ``authorization: Bearer <token>`` of a scope that opens the method."""

    def __init__(self, tokens: AdminTokens, p2p_tokens: AdminTokens | None = None) -> None:
        self._tokens = tokens
        self._p2p_tokens = p2p_tokens

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        """Pass authorised calls on; refuse the rest (see the module docstring)."""
        method: str = handler_call_details.method
        if method.startswith(OPEN_PREFIXES):
            return await continuation(handler_call_details)
        scope = self.scope(handler_call_details.invocation_metadata)
        if scope is Scope.ADMIN or (scope is Scope.P2P and method.startswith(P2P_PREFIX)):
            return await continuation(handler_call_details)
        handler = await continuation(handler_call_details)
        if scope is Scope.P2P:
            return _denied(handler, grpc.StatusCode.PERMISSION_DENIED, P2P_DENIED_DETAILS)
        return _denied(handler, grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_DETAILS)

    def scope(self, metadata: Any) -> Scope:
        """The widest scope any ``authorization`` entry of ``metadata`` opens."""
        best = Scope.NONE
        for key, value in metadata or ():
            if key.lower() != "authorization":
                continue
            given = value if isinstance(value, bytes) else str(value).encode("latin-1", "replace")
            if _matches(self._tokens, given):
                return Scope.ADMIN
            if self._p2p_tokens is not None and _matches(self._p2p_tokens, given):
                best = Scope.P2P
        return best


def _matches(tokens: AdminTokens, given: bytes) -> bool:
    """Whether ``given`` is ``Bearer <one of tokens>`` (constant time, see AdminTokens)."""
    try:
        tokens.check(given)
    except AuthenticationError:
        return False
    return True


def _denied(handler: Any, code: grpc.StatusCode, details: str) -> Any:
    """A handler of the same shape that aborts with ``code`` and ``details``."""

    async def deny_unary(request: Any, context: Any) -> Any:
        await context.abort(code, details)

    async def deny_stream(request: Any, context: Any) -> Any:
        await context.abort(code, details)
        yield  # pragma: no cover - makes this an async generator

    if handler is None:
        return None
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(
            deny_stream,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    return grpc.unary_unary_rpc_method_handler(
        deny_unary,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
