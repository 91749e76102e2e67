"""The registry's gRPC server: ModelExpress health/api/model/p2p services and grpc.health.v1.

Servicers are thin: they translate protobuf messages to and from
:mod:`flexinfer_registry.core` calls.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health_pb2 as std_health_pb2
from grpc_health.v1 import health_pb2_grpc as std_health_grpc
from grpc_health.v1.health import aio as health_aio
from opentelemetry.trace import TracerProvider

from flexinfer_common.auth import AdminTokens
from flexinfer_common.grpc_tracing import AioTracingInterceptor
from flexinfer_registry._generated.model_express import (
    api_pb2,
    api_pb2_grpc,
    health_pb2,
    health_pb2_grpc,
    p2p_pb2_grpc,
)
from flexinfer_registry.core.info import ServerInfo
from flexinfer_registry.core.service import RegistryCore
from flexinfer_registry.server.grpc_auth import TokenAuthInterceptor
from flexinfer_registry.server.model_service import ModelService, add_model_service
from flexinfer_registry.server.p2p_service import P2pService

log = logging.getLogger(__name__)

# Names reported by grpc.health.v1: "" is the whole server, as Kubernetes' gRPC probe asks.
SERVICE_NAMES = (
    "",
    "model_express.health.HealthService",
    "model_express.api.ApiService",
    "model_express.model.ModelService",
    "model_express.p2p.P2pService",
)


class HealthService(health_pb2_grpc.HealthServiceServicer):
    """model_express.health.HealthService."""

    def __init__(self, info: ServerInfo) -> None:
        self._info = info

    async def GetHealth(  # noqa: N802 (the RPC name is fixed by the proto)
        self, request: health_pb2.HealthRequest, context: Any
    ) -> health_pb2.HealthResponse:
        """Version, "ok" and uptime in seconds."""
        return health_pb2.HealthResponse(
            version=self._info.version, status="ok", uptime=self._info.uptime_seconds()
        )


class ApiService(api_pb2_grpc.ApiServiceServicer):
    """model_express.api.ApiService."""

    def __init__(self, info: ServerInfo) -> None:
        self._info = info

    async def SendRequest(  # noqa: N802 (the RPC name is fixed by the proto)
        self, request: api_pb2.ApiRequest, context: Any
    ) -> api_pb2.ApiResponse:
        """Dispatch ``request.action`` to the core."""
        payload = request.payload if request.HasField("payload") else None
        answer = self._info.answer(request.action, payload)
        return api_pb2.ApiResponse(success=answer.success, data=answer.data, error=answer.error)


def format_address(host: str, port: int) -> str:
    """``host:port``, with brackets around an IPv6 host."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass
class GrpcServer:
    """A started gRPC server and the address it is bound to."""

    server: Any
    health: Any
    address: str

    async def stop(self, grace: float) -> None:
        """Report NOT_SERVING, then let in-flight calls finish for ``grace`` seconds."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)


@dataclass(frozen=True)
class GrpcOptions:
    """Listen address, message limit, the optional bearer tokens (admin, P2P, fetch) and
    tracer provider."""

    host: str = "127.0.0.1"
    port: int = 8001
    max_message_bytes: int = 100 * 1024 * 1024
    tokens: AdminTokens | None = None
    p2p_tokens: AdminTokens | None = None
    """Tokens that open the P2pService only (engines'); used only beside ``tokens``."""
    fetch_tokens: AdminTokens | None = None
    """Tokens that open the download Jobs' ModelService calls only; used only beside
    ``tokens``."""
    tracer_provider: TracerProvider | None = None
    """Set when tracing is on: each call is a span under the caller's ``traceparent``."""


async def start_grpc_server(
    options: GrpcOptions, info: ServerInfo, core: RegistryCore | None = None
) -> GrpcServer:
    """Bind host:port (0 = any free port), register every service and start serving."""
    interceptors: list[grpc.aio.ServerInterceptor] = []
    if options.tracer_provider is not None:
        # First, so a call refused for its token is traced too.
        interceptors.append(AioTracingInterceptor(options.tracer_provider))
    if options.tokens:
        interceptors.append(
            TokenAuthInterceptor(options.tokens, options.p2p_tokens, options.fetch_tokens)
        )
    limits = [
        ("grpc.max_send_message_length", options.max_message_bytes),
        ("grpc.max_receive_message_length", options.max_message_bytes),
    ]
    server = grpc.aio.server(interceptors=interceptors, options=limits)
    # The generated registration functions are untyped (protoc emits no stubs for them).
    health_pb2_grpc.add_HealthServiceServicer_to_server(HealthService(info), server)  # type: ignore[no-untyped-call]
    api_pb2_grpc.add_ApiServiceServicer_to_server(ApiService(info), server)  # type: ignore[no-untyped-call]
    if core is not None:
        add_model_service(ModelService(core), server)
        p2p_pb2_grpc.add_P2pServiceServicer_to_server(P2pService(core), server)  # type: ignore[no-untyped-call]
    std_health = health_aio.HealthServicer()
    std_health_grpc.add_HealthServicer_to_server(std_health, server)
    host, port = options.host, options.port
    try:
        bound = server.add_insecure_port(format_address(host, port))
    except RuntimeError as exc:
        raise OSError(f"cannot listen for gRPC on {format_address(host, port)}: {exc}") from exc
    if not bound:
        raise OSError(f"cannot listen for gRPC on {format_address(host, port)}")
    await server.start()
    names = SERVICE_NAMES if core is not None else SERVICE_NAMES[:3]
    for name in names:
        await std_health.set(name, std_health_pb2.HealthCheckResponse.SERVING)
    address = format_address(host, bound)
    log.info("registry gRPC listening on %s", address)
    return GrpcServer(server=server, health=std_health, address=address)
