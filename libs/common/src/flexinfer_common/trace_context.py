"""W3C Trace Context: a client's ``traceparent`` validated before it becomes a parent, and
one built from our own span.

A ``traceparent`` is client input: it is used only when it is well formed (version 00, or a
later version's first four fields), names a non-zero trace and span, and keeps only the
sampled flag; anything else starts a trace of our own. What is sent on is always built
here from our span's ids, never the client's bytes.
"""

from __future__ import annotations

import re

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, TraceFlags

TRACEPARENT = b"traceparent"
_TRACEPARENT = re.compile(
    rb"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[\x21-\x7e]*)?"
)
"""version-trace_id-parent_id-flags; a later version may append fields after a dash."""
_INVALID_VERSION = b"ff"
_ZERO_TRACE = b"0" * 32
_ZERO_SPAN = b"0" * 16


def parent_context(value: bytes | None) -> Context | None:
    """The remote parent a client's ``traceparent`` names; None when absent or invalid
    (the request then starts a trace of its own)."""
    if value is None:
        return None
    match = _TRACEPARENT.fullmatch(value.strip())
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == _INVALID_VERSION or (version == b"00" and rest is not None):
        return None
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    context = SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(int(flags, 16) & TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(context))


def traceparent(span: Span) -> bytes:
    """The version-00 ``traceparent`` naming ``span`` as the parent, built from its ids."""
    ctx = span.get_span_context()
    return b"00-%032x-%016x-%02x" % (ctx.trace_id, ctx.span_id, int(ctx.trace_flags))
