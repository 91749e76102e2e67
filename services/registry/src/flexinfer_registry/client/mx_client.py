"""A small synchronous ModelExpress gRPC client for ``flexinfer mx``, on our generated stubs."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from flexinfer_common.grpc_tracing import trace_metadata
from flexinfer_registry._generated.model_express import (
    api_pb2,
    api_pb2_grpc,
    health_pb2,
    health_pb2_grpc,
    model_pb2,
    model_pb2_grpc,
)
from flexinfer_registry.client.addresses import cleartext_address
from flexinfer_registry.client.chunk_decoder import (
    FileChunkView,
    WireFormatError,
    decode_file_chunk,
)
from flexinfer_registry.client.errors import CallError
from flexinfer_registry.client.grpc_stream import unary_stream

DEFAULT_ADDRESS = "localhost:8001"
STATUS_NAMES = {0: "DOWNLOADING", 1: "DOWNLOADED", 2: "ERROR"}
PROVIDERS = {"hugging-face": 0, "huggingface": 0, "hf": 0, "ngc": 1, "gcs": 2, "s3": 3, "oci": 0}
"""--provider spellings -> ``model_express.model.ModelProvider`` values. The enum has no OCI
value: an ``oci://`` name's scheme picks the OCI provider whatever the enum says."""
UNREACHABLE = frozenset({grpc.StatusCode.UNAVAILABLE})
STREAM_FILES = "/model_express.model.ModelService/StreamModelFiles"


class ServerUnreachableError(Exception):
    """The registry could not be reached at all (exit code 3)."""


class OperationFailedError(Exception):
    """The server answered, but the operation failed (exit code 1)."""


class NotCachedError(OperationFailedError):
    """The model is not in the registry's cache (NOT_FOUND): download it first."""


def server_address(flag: str | None, env: Mapping[str, str] | None = None) -> str:
    """--server, else MODEL_EXPRESS_URL (it wins, as in ModelExpress), else MX_SERVER_ADDRESS;
    TlsNotSupportedError for an ``https://`` address (it used to be dialled in cleartext)."""
    env = os.environ if env is None else env
    raw = flag or env.get("MODEL_EXPRESS_URL") or env.get("MX_SERVER_ADDRESS") or DEFAULT_ADDRESS
    return cleartext_address(raw)


MAX_MESSAGE_BYTES = 100 * 1024 * 1024
"""Largest message we accept: FileChunks of up to 16 MiB (the server's max chunk) fit, as
with modelexpress's client, which sets the same limit; grpcio's 4 MiB default would not."""
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
"""Channel options of the flexinfer mx client's grpcio channel."""


@dataclass
class MxClient:
    """One channel to the registry; every call has a deadline.

    ``token``: sent as ``authorization: Bearer <token>`` on every call, for a registry
    started with an auth token. Each call also carries the current span's ``traceparent``
    (none without one), so the registry's span joins the caller's trace.
    """

    address: str
    timeout_s: float = 10.0
    download_timeout_s: float = 3600.0
    token: str | None = None

    def __post_init__(self) -> None:
        self.address = cleartext_address(self.address)
        self._metadata = (("authorization", f"Bearer {self.token}"),) if self.token else ()
        self._channel = grpc.insecure_channel(self.address, options=CHANNEL_OPTIONS)
        self._model = model_pb2_grpc.ModelServiceStub(self._channel)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()

    def __enter__(self) -> MxClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unary(self, method: Callable[..., Any], request: Any) -> Any:
        """One unary call with the deadline and the token; gRPC errors become the CLI's."""
        try:
            return method(request, timeout=self.timeout_s, metadata=trace_metadata(self._metadata))
        except grpc.RpcError as exc:
            raise _translate(exc, self.address) from exc

    def health(self) -> dict[str, Any]:
        """HealthService.GetHealth."""
        stub = health_pb2_grpc.HealthServiceStub(self._channel)  # type: ignore[no-untyped-call]
        reply = self._unary(stub.GetHealth, health_pb2.HealthRequest())
        return {"version": reply.version, "status": reply.status, "uptime": int(reply.uptime)}

    def ping(self) -> str:
        """ApiService.SendRequest(action="ping"); the reply data ("pong")."""
        stub = api_pb2_grpc.ApiServiceStub(self._channel)  # type: ignore[no-untyped-call]
        request = api_pb2.ApiRequest(id="flexinfer-mx", action="ping")
        reply = self._unary(stub.SendRequest, request)
        if not reply.success:
            raise OperationFailedError(reply.error or "ping failed")
        return bytes(reply.data).decode(errors="replace")

    def ensure(
        self, name: str, provider: int, revision: str | None, ignore_weights: bool
    ) -> Iterator[dict[str, Any]]:
        """EnsureModelDownloaded: each status update as a dict, until DOWNLOADED or ERROR."""
        request = model_pb2.ModelDownloadRequest(
            model_name=name,
            provider=_enum(provider),
            ignore_weights=ignore_weights,
        )
        if revision:
            request.revision = revision
        try:
            for update in self._model.EnsureModelDownloaded(
                request, timeout=self.download_timeout_s, metadata=trace_metadata(self._metadata)
            ):
                yield _update(update)
                if update.status != model_pb2.DOWNLOADING:
                    return  # the final update says it all, as ModelCacheClient reads it
        except grpc.RpcError as exc:
            raise _translate(exc, self.address) from exc

    def list_files(self, name: str, provider: int, revision: str | None) -> dict[str, Any]:
        """ListModelFiles."""
        request = model_pb2.ModelFilesRequest(model_name=name, provider=_enum(provider))
        if revision:
            request.revision = revision
        reply = self._unary(self._model.ListModelFiles, request)
        files = [{"path": f.relative_path, "size": int(f.size)} for f in reply.files]
        return {"model_name": reply.model_name, "files": files, "total_size": int(reply.total_size)}

    def delete(self, name: str, provider: int) -> dict[str, Any]:
        """DeleteModel."""
        request = model_pb2.DeleteModelRequest(model_name=name, provider=_enum(provider))
        reply = self._unary(self._model.DeleteModel, request)
        return {"success": bool(reply.success), "message": reply.message}

    def stream(
        self, name: str, provider: int, revision: str | None, *, chunk_size: int | None = None
    ) -> Iterator[FileChunkView]:
        """StreamModelFiles: each FileChunk, its data a view valid until the next chunk.

        ``chunk_size``: bytes per chunk (the server's default, 1 MiB, when None). The call
        goes over a connection of its own (:mod:`.grpc_stream`), not the grpcio channel:
        the chunks arrive in one reused buffer, read from the socket in place, which
        streams about twice as fast as grpcio (bench/RESULTS.md).
        """
        request = model_pb2.ModelFilesRequest(model_name=name, provider=_enum(provider))
        if revision:
            request.revision = revision
        if chunk_size is not None:
            request.chunk_size = chunk_size
        messages = unary_stream(
            self.address,
            STREAM_FILES,
            request.SerializeToString(),
            timeout_s=self.download_timeout_s,
            max_message_bytes=MAX_MESSAGE_BYTES,
            metadata=trace_metadata(self._metadata),
        )
        try:
            for message in messages:
                yield decode_file_chunk(message)
        except CallError as exc:
            raise _status_error(exc.code, exc.details, self.address) from exc
        except WireFormatError as exc:
            raise OperationFailedError(
                f"the registry at {self.address} sent a malformed FileChunk: {exc}"
            ) from exc
        finally:
            messages.close()  # leaving early cancels the call on the server


def _enum(value: int) -> Any:
    """A proto enum value from its number (the generated stubs type enums narrowly)."""
    return value


def _update(update: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "model_name": update.model_name,
        "status": STATUS_NAMES.get(int(update.status), str(update.status)),
    }
    if update.HasField("message"):
        data["message"] = update.message
    if update.HasField("resolved_revision"):
        data["resolved_revision"] = update.resolved_revision
    return data


def _translate(exc: grpc.RpcError, address: str) -> Exception:
    code = exc.code() if isinstance(exc, grpc.Call) else None
    details = (exc.details() if isinstance(exc, grpc.Call) else None) or str(exc)
    return _status_error(code, details, address)


def _status_error(code: grpc.StatusCode | None, details: str, address: str) -> Exception:
    """The CLI's error for a failed call: unreachable (exit 3) or failed (exit 1)."""
    if code in UNREACHABLE:
        return ServerUnreachableError(f"cannot reach the registry at {address}: {details}")
    if code is grpc.StatusCode.NOT_FOUND:
        return NotCachedError(details)
    name = code.name if code is not None else "ERROR"
    return OperationFailedError(f"{name}: {details}")
