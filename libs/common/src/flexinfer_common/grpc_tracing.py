"""W3C trace context over gRPC metadata, as HTTP headers carry it.

Clients add :func:`trace_metadata` to each call's metadata: the current span's
``traceparent`` (and ``tracestate``, baggage) through OpenTelemetry's configured
propagators (``OTEL_PROPAGATORS``, W3C trace context by default), the same ones the
FastAPI instrumentation reads on the HTTP side. Without a valid current span nothing is
added, so an untraced client sends exactly the metadata it did before.

Servers install :class:`AioTracingInterceptor` (grpc.aio) or :class:`TracingInterceptor`
(the thread-pool server): each call runs inside a SERVER span named
``<package.Service>/<Method>``, the child of the span the caller's metadata names, and that
span is current while the handler runs, so spans the handler starts join the same trace.
Unary-request RPCs are traced (every RPC FlexInfer serves is one); client-streaming ones
pass through untraced.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode, TracerProvider

Metadata = Sequence[tuple[str, str]]

SERVER_ERRORS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)
"""Codes that mark a server span as failed (OpenTelemetry's gRPC conventions): the others
(NOT_FOUND, INVALID_ARGUMENT...) are the caller's mistakes, not the server's."""
UNTRACED_PREFIXES = ("/grpc.health.v1.Health/",)
"""Probes: one every few seconds from kubelet, as /healthz is left out on the HTTP side."""
TRACER_NAME = "flexinfer.grpc"


def trace_metadata(metadata: Metadata = (), context: Context | None = None) -> Metadata:
    """``metadata`` plus the trace context of ``context`` (the current one when None)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=context)
    if not carrier:
        return metadata
    return (*metadata, *carrier.items())


def incoming_context(metadata: Sequence[tuple[str, str | bytes]] | None) -> Context:
    """The remote parent a call's metadata names (an empty context when none is valid)."""
    carrier = {
        key.lower(): value
        for key, value in metadata or ()
        if isinstance(value, str)  # binary (-bin) entries carry no trace context
    }
    return propagate.extract(carrier)


def _names(method: str) -> tuple[str, str]:
    """``/pkg.Service/Method`` -> (``pkg.Service``, ``Method``)."""
    service, _, name = method.lstrip("/").partition("/")
    return service, name


class _ServerSpans:
    """Starts each call's SERVER span and ends it with the call's status code."""

    def __init__(self, provider: TracerProvider | None) -> None:
        source = provider if provider is not None else trace.get_tracer_provider()
        self._tracer = source.get_tracer(TRACER_NAME)

    def traced(self, method: str) -> bool:
        """Whether calls of ``method`` get a span."""
        return not method.startswith(UNTRACED_PREFIXES)

    @contextmanager
    def serving(self, details: Any, context: Any) -> Iterator[None]:
        """The call's span, current for the handler; ended with the code it answered."""
        method: str = details.method
        service, name = _names(method)
        parent = incoming_context(details.invocation_metadata)
        span = self._tracer.start_span(
            f"{service}/{name}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": name},
        )
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        failure: BaseException | None = None
        try:
            yield
        except BaseException as exc:  # an abort or a bug: the code says which
            failure = exc
            raise
        finally:
            otel_context.detach(token)
            code = _code(context, failure)
            span.set_attribute("rpc.grpc.status_code", code.value[0])
            if code in SERVER_ERRORS:
                span.set_status(Status(StatusCode.ERROR, code.name))
            span.end()


def _code(context: Any, failure: BaseException | None) -> grpc.StatusCode:
    """The status the call ends with: what the handler set or aborted with, else OK, or
    UNKNOWN for an exception nobody turned into a status."""
    reader = getattr(context, "code", None)
    code = reader() if callable(reader) else None
    if isinstance(code, grpc.StatusCode):
        return code
    if failure is None or isinstance(failure, GeneratorExit):
        return grpc.StatusCode.OK
    if isinstance(failure, asyncio.CancelledError):
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode.UNKNOWN


class AioTracingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """A grpc.aio server's calls, each in a SERVER span under the caller's trace."""

    def __init__(self, provider: TracerProvider | None = None) -> None:
        self._spans = _ServerSpans(provider)

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        """The handler, wrapped so its call runs in a span."""
        handler = await continuation(handler_call_details)
        return _wrapped(handler, handler_call_details, self._spans, self._unary, self._streaming)

    def _unary(self, behavior: Any, details: Any) -> Any:
        async def call(request: Any, context: Any) -> Any:
            with self._spans.serving(details, context):
                return await behavior(request, context)

        return call

    def _streaming(self, behavior: Any, details: Any) -> Any:
        async def call(request: Any, context: Any) -> AsyncIterator[Any]:
            # grpc.aio drives the whole generator in the call's own task, so the span's
            # context is attached and detached in the same context.
            with self._spans.serving(details, context):
                async for message in behavior(request, context):
                    yield message

        return call


class TracingInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    """A thread-pool gRPC server's calls, each in a SERVER span under the caller's trace."""

    def __init__(self, provider: TracerProvider | None = None) -> None:
        self._spans = _ServerSpans(provider)

    def intercept_service(
        self, continuation: Callable[[Any], Any], handler_call_details: Any
    ) -> Any:
        """The handler, wrapped so its call runs in a span."""
        handler = continuation(handler_call_details)
        return _wrapped(handler, handler_call_details, self._spans, self._unary, self._streaming)

    def _unary(self, behavior: Any, details: Any) -> Any:
        def call(request: Any, context: Any) -> Any:
            with self._spans.serving(details, context):
                return behavior(request, context)

        return call

    def _streaming(self, behavior: Any, details: Any) -> Any:
        def call(request: Any, context: Any) -> Iterator[Any]:
            with self._spans.serving(details, context):
                yield from behavior(request, context)

        return call


def _wrapped(
    handler: Any,
    details: Any,
    spans: _ServerSpans,
    unary: Callable[[Any, Any], Any],
    streaming: Callable[[Any, Any], Any],
) -> Any:
    """``handler`` with its behaviour run in a span (``unary``/``streaming`` wrap it), or as
    it is: absent, client-streaming (none here) or untraced (health probes)."""
    if handler is None or handler.request_streaming or not spans.traced(details.method):
        return handler
    if handler.response_streaming:
        return _replace(handler, streaming(handler.unary_stream, details))
    return _replace(handler, unary(handler.unary_unary, details))


def _replace(handler: Any, behavior: Any) -> Any:
    """A handler like ``handler`` (same (de)serializers) that runs ``behavior``."""
    make = (
        grpc.unary_stream_rpc_method_handler
        if handler.response_streaming
        else grpc.unary_unary_rpc_method_handler
    )
    return make(
        behavior,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
