"""The registry's gRPC server: ModelExpress health/api services and grpc.health.v1.

Servicers are thin: they translate protobuf messages to and from :mod:`.core` calls.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health_pb2 as std_health_pb2
from grpc_health.v1 import health_pb2_grpc as std_health_grpc
from grpc_health.v1.health import aio as health_aio

from flexinfer_registry._generated.model_express import (
    api_pb2,
    api_pb2_grpc,
    health_pb2,
    health_pb2_grpc,
)
from flexinfer_registry.core.info import ServerInfo

log = logging.getLogger(__name__)

# Names reported by grpc.health.v1: "" is the whole server, as Kubernetes' gRPC probe asks.
SERVICE_NAMES = ("", "model_express.health.HealthService", "model_express.api.ApiService")


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


async def start_grpc_server(host: str, port: int, info: ServerInfo) -> GrpcServer:
    """Bind host:port (0 = any free port), register every service and start serving."""
    server = grpc.aio.server()
    # The generated registration functions are untyped (protoc emits no stubs for them).
    health_pb2_grpc.add_HealthServiceServicer_to_server(HealthService(info), server)  # type: ignore[no-untyped-call]
    api_pb2_grpc.add_ApiServiceServicer_to_server(ApiService(info), server)  # type: ignore[no-untyped-call]
    std_health = health_aio.HealthServicer()
    std_health_grpc.add_HealthServicer_to_server(std_health, server)
    try:
        bound = server.add_insecure_port(format_address(host, port))
    except RuntimeError as exc:
        raise OSError(f"cannot listen for gRPC on {format_address(host, port)}: {exc}") from exc
    if not bound:
        raise OSError(f"cannot listen for gRPC on {format_address(host, port)}")
    await server.start()
    for name in SERVICE_NAMES:
        await std_health.set(name, std_health_pb2.HealthCheckResponse.SERVING)
    address = format_address(host, bound)
    log.info("registry gRPC listening on %s", address)
    return GrpcServer(server=server, health=std_health, address=address)
