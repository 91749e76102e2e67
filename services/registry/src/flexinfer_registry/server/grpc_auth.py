"""Bearer-token scopes of the registry's gRPC API.

Three scopes. The admin token (``FLEXINFER_REGISTRY_AUTH_TOKEN``) opens every method. The
two narrow ones open only the methods ``METHOD_SCOPES`` lists for them:

- the P2P token (``FLEXINFER_REGISTRY_P2P_TOKEN``): ``model_express.p2p.P2pService``
  (PublishMetadata, ListSources, GetMetadata, UpdateStatus), all an engine needs to find
  peers and publish itself. A leaked engine token can list and publish sources, not
  download, stream or delete models;
- the fetch token (``FLEXINFER_REGISTRY_FETCH_TOKEN``): ``model_express.model.ModelService``
  EnsureModelDownloaded, ListModelFiles and StreamModelFiles, exactly what the download
  Jobs' registry client (``flexinfer mx model download --cache-dir``) calls: have the
  registry download the model, list its files, stream them onto the cache volume. A leaked
  Job token can fetch and read models, not delete them, publish P2P sources or call
  ApiService.

Engines get the P2P token and download Jobs the fetch token, never the admin one. A method
no narrow scope lists (a new RPC too) is the admin token's alone. Health probes need none.

Refusals: no token, or one matching no scope, is UNAUTHENTICATED; a narrow token on a
method outside its scope is PERMISSION_DENIED (the caller is known, the method is not
theirs), with details naming the scope. Details never carry the token itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from enum import Enum
from types import MappingProxyType
from typing import Any

import grpc

from flexinfer_common.auth import AdminTokens, AuthenticationError

OPEN_PREFIXES = ("/grpc.health.v1.Health/", "/model_express.health.HealthService/")
"""Probes must work without credentials (kubelet has none)."""

P2P_SERVICE = "model_express.p2p.P2pService"
MODEL_SERVICE = "model_express.model.ModelService"


class Scope(Enum):
    """What a call's token opens."""

    P2P = "p2p"
    FETCH = "fetch"
    ADMIN = "admin"


_P2P = frozenset({Scope.P2P})
_FETCH = frozenset({Scope.FETCH})
METHOD_SCOPES: Mapping[str, frozenset[Scope]] = MappingProxyType(
    {
        f"/{P2P_SERVICE}/PublishMetadata": _P2P,
        f"/{P2P_SERVICE}/ListSources": _P2P,
        f"/{P2P_SERVICE}/GetMetadata": _P2P,
        f"/{P2P_SERVICE}/UpdateStatus": _P2P,
        f"/{MODEL_SERVICE}/EnsureModelDownloaded": _FETCH,
        f"/{MODEL_SERVICE}/ListModelFiles": _FETCH,
        f"/{MODEL_SERVICE}/StreamModelFiles": _FETCH,
    }
)
"""Full method name -> the narrow scopes that open it. The admin scope opens every method;
a method not listed here is the admin scope's alone (DeleteModel, ApiService, new RPCs)."""

UNAUTHENTICATED_DETAILS = "missing or invalid bearer token"
DENIED_DETAILS: Mapping[Scope, str] = MappingProxyType(
    {
        Scope.P2P: f"the P2P token authorises {P2P_SERVICE} only; this method is outside its scope",
        Scope.FETCH: f"the fetch token authorises {MODEL_SERVICE} EnsureModelDownloaded, "
        "ListModelFiles and StreamModelFiles only; this method is outside its scope",
    }
)
"""PERMISSION_DENIED details of a narrow token on a method outside its scope."""


class TokenAuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Requires ``authorization: Bearer <token>`` of a scope that opens the method."""

    def __init__(
        self,
        tokens: AdminTokens,
        p2p_tokens: AdminTokens | None = None,
        fetch_tokens: AdminTokens | None = None,
    ) -> None:
        self._tokens = tokens
        narrow = {Scope.P2P: p2p_tokens, Scope.FETCH: fetch_tokens}
        self._narrow = {scope: found for scope, found in narrow.items() if found is not None}

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        """Pass authorised calls on; refuse the rest (see the module docstring)."""
        method: str = handler_call_details.method
        if method.startswith(OPEN_PREFIXES):
            return await continuation(handler_call_details)
        held = self.scopes(handler_call_details.invocation_metadata)
        if Scope.ADMIN in held or held & METHOD_SCOPES.get(method, frozenset()):
            return await continuation(handler_call_details)
        handler = await continuation(handler_call_details)
        if held:
            details = "; ".join(DENIED_DETAILS[scope] for scope in Scope if scope in held)
            return _denied(handler, grpc.StatusCode.PERMISSION_DENIED, details)
        return _denied(handler, grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_DETAILS)

    def scopes(self, metadata: Any) -> frozenset[Scope]:
        """The scopes the ``authorization`` entries of ``metadata`` hold: ``{ADMIN}`` as
        soon as one is the admin token, else the narrow ones matched (empty: none)."""
        held: set[Scope] = set()
        for key, value in metadata or ():
            if key.lower() != "authorization":
                continue
            given = value if isinstance(value, bytes) else str(value).encode("latin-1", "replace")
            if _matches(self._tokens, given):
                return frozenset({Scope.ADMIN})
            held |= {scope for scope, tokens in self._narrow.items() if _matches(tokens, given)}
        return frozenset(held)


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
