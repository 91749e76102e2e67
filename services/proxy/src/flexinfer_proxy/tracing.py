"""Traces of proxied requests: one server span per request, children for its steps, and
the W3C ``traceparent`` the engine gets.

The client's ``traceparent`` is validated (W3C Trace Context, version 00 and later
versions' first four fields) and only then used as the parent; what goes upstream is a
header built here from our own upstream span, never the client's bytes. Without tracing
the pipeline holds no ``RequestTrace`` and the client's header passes through untouched,
as through any transparent proxy.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.trace import (
    Span,
    SpanKind,
    Status,
    StatusCode,
    Tracer,
)

from flexinfer_common.http1.downstream import Headers
from flexinfer_common.trace_context import TRACEPARENT, parent_context, traceparent

REQUEST_ID = b"x-request-id"
"""The client's request ID: shown on the request's log lines (it is forwarded as sent)."""
_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:/+=-]{1,128}")


def request_id(value: bytes | None) -> str:
    """The client's request ID for logs when it is short and plain ("" otherwise), so a
    client cannot write arbitrary text into our log lines."""
    if value is None or _REQUEST_ID.fullmatch(value) is None:
        return ""
    return value.decode("ascii")


class RequestTrace:
    """The spans of one proxied request: the server span and its children."""

    __slots__ = ("_context", "_tracer", "recording", "span")

    def __init__(self, tracer: Tracer, route: str, client_traceparent: bytes | None) -> None:
        self._tracer = tracer
        self.span = tracer.start_span(
            f"POST {route}",
            context=parent_context(client_traceparent),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": "POST", "http.route": route},
        )
        self._context = trace.set_span_in_context(self.span)
        self.recording = self.span.is_recording()
        """False when the sampler dropped the trace: no child span is made (each costs tens
        of µs in the SDK, and a sampler that follows the parent would drop it too)."""

    @contextmanager
    def step(self, name: str, kind: SpanKind = SpanKind.INTERNAL) -> Iterator[Span]:
        """A child span for one step of the request (model resolution, queue wait...)."""
        if not self.recording:
            yield self.span
            return
        span = self._tracer.start_span(name, context=self._context, kind=kind)
        try:
            yield span
        except BaseException as exc:
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise
        finally:
            span.end()

    def start_upstream(self, url: str) -> Span:
        """The span of one forward to the engine at ``url`` (ended by the caller); the
        unsampled request's own span when its trace is dropped (ending it is a no-op)."""
        if not self.recording:
            return self.span
        return self._tracer.start_span(
            "upstream", context=self._context, kind=SpanKind.CLIENT, attributes={"server.url": url}
        )

    def upstream_headers(self, headers: Headers, upstream: Span) -> Headers:
        """``headers`` with the client's ``traceparent`` replaced by one naming ``upstream``."""
        kept = [(k, v) for k, v in headers if k != TRACEPARENT]
        kept.append((TRACEPARENT, traceparent(upstream)))
        return kept

    def end(self, model: str, status: int | None) -> None:
        """End the server span with the answer's status (None: the client left)."""
        span = self.span
        if model:
            span.set_attribute("flexinfer.model", model)
        if status is not None:
            span.set_attribute("http.response.status_code", status)
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR))
        span.end()

    def demand_traceparent(self) -> str:
        """The server span as a ``traceparent`` for the demand a cold start publishes."""
        return traceparent(self.span).decode()
