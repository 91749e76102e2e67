"""Per-request fields on every log line: the model, the request ID and the trace.

A request's handler binds an object that can tell its fields (``bind``) into a context
variable, which each asyncio task copies: the fields are read only when a line is
actually written, so a request that logs nothing pays one context-variable set. The
trace and span IDs come from the bound object or, failing that, from the current
OpenTelemetry span.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Protocol

from opentelemetry import trace

FIELDS = ("model", "request_id", "trace_id", "span_id")
"""The context fields a log line can carry, in the order the text format shows them."""


class LogFields(Protocol):
    """What a request tells its log lines."""

    def log_fields(self) -> Mapping[str, str]:
        """Fields among ``FIELDS`` (empty values are left out of the line)."""
        ...


_CURRENT: ContextVar[LogFields | None] = ContextVar("flexinfer_log_fields", default=None)


def bind(source: LogFields) -> None:
    """Log lines written from this task (and tasks it starts) carry ``source``'s fields."""
    _CURRENT.set(source)


def context_fields() -> dict[str, str]:
    """The bound request's fields and the current span's IDs, empty ones left out."""
    bound = _CURRENT.get()
    fields = {k: v for k, v in (bound.log_fields() if bound else {}).items() if v}
    if "trace_id" not in fields:
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            fields["trace_id"] = format(ctx.trace_id, "032x")
            fields["span_id"] = format(ctx.span_id, "016x")
    return fields


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the context fields."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as JSON."""
        entry = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **context_fields(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message [model=… request_id=… trace_id=…]`` for a terminal."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        """The record as one readable line, with the context fields it has."""
        line = super().format(record)
        fields = context_fields()
        shown = " ".join(f"{name}={fields[name]}" for name in FIELDS[:3] if name in fields)
        return f"{line} [{shown}]" if shown else line
