"""Log lines carry the bound request's fields and the current span, as JSON or as text."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry.sdk.trace import TracerProvider

from flexinfer_common.logcontext import JsonFormatter, TextFormatter, bind


class Request:
    """A request that tells its model and ID."""

    def __init__(self, model: str, request_id: str) -> None:
        self.model = model
        self.request_id = request_id

    def log_fields(self) -> Mapping[str, str]:
        """Its fields (an empty one is left out of the line)."""
        return {"model": self.model, "request_id": self.request_id}


@contextmanager
def captured(formatter: logging.Formatter) -> Iterator[io.StringIO]:
    """What the ``test.ctx`` logger writes through ``formatter``."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    logger = logging.getLogger("test.ctx")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield out
    finally:
        logger.removeHandler(handler)


async def test_each_task_logs_its_own_requests_fields_as_json() -> None:
    bound: list[str] = []
    both = asyncio.Event()

    async def serve(model: str, request_id: str) -> None:
        bind(Request(model, request_id))
        bound.append(model)
        if len(bound) == 2:
            both.set()
        await both.wait()  # log only once the other request's task has bound its own
        logging.getLogger("test.ctx").info("served")

    with captured(JsonFormatter()) as out:
        await asyncio.gather(
            asyncio.create_task(serve("default/a", "req-1")),
            asyncio.create_task(serve("default/b", "")),
        )
        logging.getLogger("test.ctx").info("outside any request")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    served = {line["model"]: line for line in lines[:2]}  # the two tasks log in either order
    assert {"model": "default/a", "request_id": "req-1"}.items() <= served["default/a"].items()
    assert "request_id" not in served["default/b"]
    assert "model" not in lines[2]
    assert lines[2]["message"] == "outside any request"


def test_the_current_span_gives_the_trace_id_and_text_shows_the_fields() -> None:
    tracer = TracerProvider().get_tracer("test")
    with captured(JsonFormatter()) as out, tracer.start_as_current_span("work") as span:
        logging.getLogger("test.ctx").info("inside a span")
    entry = json.loads(out.getvalue())
    assert entry["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert entry["span_id"] == format(span.get_span_context().span_id, "016x")
    with captured(TextFormatter()) as text, tracer.start_as_current_span("work") as span:
        logging.getLogger("test.ctx").info("hello")
    trace_id = format(span.get_span_context().trace_id, "032x")
    assert text.getvalue().rstrip().endswith(f"test.ctx: hello [trace_id={trace_id}]")
