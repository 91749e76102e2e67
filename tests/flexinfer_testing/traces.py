"""Spans in memory for tracing tests: a tracer provider whose spans land in an exporter,
and the checks that one span is the remote child of another."""

from __future__ import annotations

import time

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind


def recording_provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    """A tracer provider that hands each span to the returned exporter as it ends."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def finished(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    """The spans called ``name`` that ended, in the order they ended."""
    return [s for s in exporter.get_finished_spans() if s.name == name]


def wait_for_spans(
    exporter: InMemorySpanExporter, name: str, count: int = 1, timeout_s: float = 30
) -> list[ReadableSpan]:
    """At least ``count`` ended spans called ``name`` (a server ends its span after the
    client saw the answer, so a test polls)."""
    deadline = time.monotonic() + timeout_s
    while len(spans := finished(exporter, name)) < count:
        names = sorted({s.name for s in exporter.get_finished_spans()})
        assert time.monotonic() < deadline, f"{count} {name!r} spans never ended (saw {names})"
        time.sleep(0.02)
    return spans


def assert_server_child(span: ReadableSpan, parent: SpanContext) -> None:
    """``span`` is a SERVER span in ``parent``'s trace whose parent is ``parent``, received
    over the wire (remote)."""
    assert span.kind is SpanKind.SERVER, span.kind
    assert span.context.trace_id == parent.trace_id, span.name
    assert span.parent is not None, f"{span.name} has no parent"
    assert span.parent.span_id == parent.span_id, span.name
    assert span.parent.is_remote, span.name


def assert_trace_root(span: ReadableSpan, *others: SpanContext) -> None:
    """``span`` started a trace of its own: no parent, and none of ``others``' trace ids."""
    assert span.parent is None, f"{span.name} has a parent: {span.parent}"
    assert span.context.trace_id not in {o.trace_id for o in others}, span.name
