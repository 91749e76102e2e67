"""The scale-up of a cold model as a span of the request that demanded it.

A proxy's demand carries the W3C traceparent of its first traced waiting request (the
event's schema validates it). The span starts when the controller first hears that
demand and ends when a replica of the model is ready (or its engine fails), so the
request's trace shows what its queue wait was spent on.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
)

SPAN_NAME = "scale-up"


def remote_parent(traceparent: str) -> SpanContext:
    """The span context a version-00 traceparent (already validated) names."""
    _, trace_id, span_id, flags = traceparent.split("-")
    return SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(int(flags, 16) & TraceFlags.SAMPLED),
    )


class ActivationTraces:
    """One open scale-up span per cold model."""

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer
        self._open: dict[str, Span] = {}

    def demanded(self, model: str, traceparent: str) -> None:
        """A traced demand for ``model``: its scale-up span starts, unless one is open."""
        if model in self._open:
            return
        parent = trace.set_span_in_context(NonRecordingSpan(remote_parent(traceparent)))
        self._open[model] = self._tracer.start_span(
            SPAN_NAME, context=parent, kind=SpanKind.CONSUMER, attributes={"flexinfer.model": model}
        )

    def traceparent(self, model: str) -> str | None:
        """The W3C traceparent of ``model``'s open scale-up span (None: none is open)."""
        span = self._open.get(model)
        if span is None:
            return None
        context = span.get_span_context()
        if not context.is_valid:
            return None
        return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"

    def replica_event(self, model: str, kind: str, expected: bool) -> None:
        """A replica of ``model`` became ready (the span ends) or its engine failed."""
        if kind == "ready":
            self._end(model, None)
        elif kind == "exited" and not expected:
            self._end(model, "the engine exited before it was ready")

    def forget(self, model: str) -> None:
        """The model is gone: its open span ends, marked as abandoned."""
        self._end(model, "the model was deleted")

    def _end(self, model: str, error: str | None) -> None:
        span = self._open.pop(model, None)
        if span is None:
            return
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()
