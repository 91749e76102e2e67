"""An asyncio client of the registry's ``model_express.model.ModelService``.

Only the messages are generated (``_generated/model_pb2``, a copy of the registry's); the
three calls are made by method path on a grpcio channel. Every failure becomes a
``RegistryCallError`` that says whether retrying can help, by the registry's own status
codes (``flexinfer_registry.server.status``): NOT_FOUND, INVALID_ARGUMENT,
PERMISSION_DENIED, FAILED_PRECONDITION and RESOURCE_EXHAUSTED are its permanent errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc

from flexinfer_common.errors import FlexInferError
from flexinfer_common.grpc_tracing import trace_metadata
from flexinfer_controller.adapters.registry._generated import model_pb2

_SERVICE = "/model_express.model.ModelService/"
MAX_MESSAGE_BYTES = 100 * 1024 * 1024
"""Largest message accepted: the registry's 16 MiB maximum chunk fits, as with the
ModelExpress client, which sets the same; grpcio's 4 MiB default would not."""
PERMANENT = frozenset(
    {
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)
PROVIDERS = {"hf": 0, "ngc": 1, "gs": 2, "gcs": 2, "s3": 3}
"""Source scheme -> ModelProvider (the registry picks by scheme anyway; sent for peers
that read the enum)."""
DOWNLOADING, DOWNLOADED, ERROR = 0, 1, 2


class RegistryCallError(FlexInferError):
    """A call failed; ``code`` is the gRPC status name, ``permanent`` whether to give up."""

    def __init__(self, message: str, *, code: str, permanent: bool) -> None:
        super().__init__(message)
        self.code = code
        self.permanent = permanent


@dataclass(frozen=True, slots=True)
class StatusUpdate:
    """One ModelStatusUpdate."""

    status: int
    message: str


@dataclass(frozen=True, slots=True)
class RemoteFile:
    """One file of a cached model, as ListModelFiles names it."""

    path: str
    size: int


@dataclass(frozen=True, slots=True)
class ModelRef:
    """What the registry calls the model: the source URL and its provider enum."""

    name: str
    provider: int

    @classmethod
    def of(cls, source: str) -> ModelRef:
        """``HF://org/m`` -> ``hf://org/m`` (schemes are case-insensitive, names are not)."""
        scheme, _, rest = source.partition("://")
        return cls(f"{scheme.lower()}://{rest}", PROVIDERS.get(scheme.lower(), 0))


class RegistryClient:
    """One channel to the registry; every call has a deadline, the bearer token and the
    current span's ``traceparent`` (none without one)."""

    def __init__(
        self, address: str, *, token: str | None, call_timeout_s: float, stream_timeout_s: float
    ) -> None:
        self.address = address
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._call_timeout_s = call_timeout_s
        self._stream_timeout_s = stream_timeout_s
        self._channel_: grpc.aio.Channel | None = None

    @property
    def _channel(self) -> grpc.aio.Channel:
        # Made on first use: an aio channel belongs to the event loop it is made in, and
        # the cache is built before the app's loop runs.
        if self._channel_ is None:
            options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
            self._channel_ = grpc.aio.insecure_channel(self.address, options=options)
        return self._channel_

    async def close(self) -> None:
        """Close the channel (calls in flight end CANCELLED)."""
        if self._channel_ is not None:
            await self._channel_.close()
            self._channel_ = None

    def ensure(self, ref: ModelRef) -> AsyncIterator[StatusUpdate]:
        """EnsureModelDownloaded: each DOWNLOADING update, then DOWNLOADED; an ERROR
        becomes the RegistryCallError of the status the call ends with."""
        request = model_pb2.ModelDownloadRequest(model_name=ref.name, provider=_enum(ref.provider))
        return self._updates(request)

    async def _updates(self, request: Any) -> AsyncIterator[StatusUpdate]:
        call = self._stream("EnsureModelDownloaded", model_pb2.ModelStatusUpdate)(
            request, timeout=self._stream_timeout_s, metadata=trace_metadata(self._metadata)
        )
        failure: str | None = None
        try:
            async for update in call:
                message = update.message if update.HasField("message") else ""
                if update.status == ERROR:
                    # The status that ends the call says why, with its code: read on.
                    failure = message or "the registry reported an error"
                    continue
                yield StatusUpdate(int(update.status), message)
                if update.status == DOWNLOADED:
                    return
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc) from exc
        finally:
            call.cancel()
        # Ended OK after ERROR: the download failed on another registry replica, which
        # tells only its message; whether it would fail again is unknown, so retry.
        raise RegistryCallError(
            failure or "the registry ended the download without a result",
            code="UNKNOWN",
            permanent=False,
        )

    async def list_files(self, ref: ModelRef) -> list[RemoteFile]:
        """ListModelFiles: the cached model's files and sizes."""
        method = self._channel.unary_unary(
            _SERVICE + "ListModelFiles",
            request_serializer=model_pb2.ModelFilesRequest.SerializeToString,
            response_deserializer=model_pb2.ModelFileList.FromString,
        )
        request = model_pb2.ModelFilesRequest(model_name=ref.name, provider=_enum(ref.provider))
        try:
            reply = await method(
                request, timeout=self._call_timeout_s, metadata=trace_metadata(self._metadata)
            )
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc) from exc
        return [RemoteFile(f.relative_path, int(f.size)) for f in reply.files]

    async def stream_files(self, ref: ModelRef, chunk_size: int | None) -> AsyncIterator[Any]:
        """StreamModelFiles: each FileChunk message."""
        request = model_pb2.ModelFilesRequest(model_name=ref.name, provider=_enum(ref.provider))
        if chunk_size is not None:
            request.chunk_size = chunk_size
        call = self._stream("StreamModelFiles", model_pb2.FileChunk)(
            request, timeout=self._stream_timeout_s, metadata=trace_metadata(self._metadata)
        )
        try:
            async for chunk in call:
                yield chunk
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc) from exc
        finally:
            call.cancel()  # leaving early ends the call on the server too

    def _stream(self, method: str, reply: Any) -> Any:
        return self._channel.unary_stream(
            _SERVICE + method,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=reply.FromString,
        )

    def _error(self, exc: grpc.aio.AioRpcError) -> RegistryCallError:
        code = exc.code()
        details = (exc.details() or code.name).splitlines()[0][:500]
        if code is grpc.StatusCode.UNAVAILABLE:
            details = f"cannot reach the registry at {self.address}: {details}"
        return RegistryCallError(details, code=code.name, permanent=code in PERMANENT)


def _enum(value: int) -> Any:
    """A proto enum value from its number (the stubs type enums narrowly)."""
    return value


async def with_stall_timeout(stream: AsyncIterator[Any], stall_s: float) -> AsyncIterator[Any]:
    """``stream``'s items; RegistryCallError(DEADLINE_EXCEEDED) after ``stall_s`` of silence."""
    iterator = aiter(stream)
    try:
        while True:
            try:
                item = await asyncio.wait_for(anext(iterator), stall_s)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise RegistryCallError(
                    f"the registry sent nothing for {stall_s:.0f}s",
                    code="DEADLINE_EXCEEDED",
                    permanent=False,
                ) from None
            yield item
    finally:
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()
