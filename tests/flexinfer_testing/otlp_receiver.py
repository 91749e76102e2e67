"""An OTLP/HTTP traces receiver for tests: what another process exports, decoded.

Spans an engine process records cannot land in the test's in-memory exporter, so the test
points the engine's standard ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` here and reads back
what arrived, decoded with the OpenTelemetry protocol's own messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import FastAPI, Request, Response
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

TRACES_PATH = "/v1/traces"


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span: its name and W3C ids in hex (parent empty for a root)."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    service: str


@dataclass
class OtlpReceiver:
    """Collects the spans POSTed to ``TRACES_PATH`` of ``app``."""

    spans: list[ReceivedSpan] = field(default_factory=list)

    def app(self) -> FastAPI:
        """The ASGI app to serve (POST /v1/traces, protobuf)."""
        app = FastAPI()

        @app.post(TRACES_PATH)
        async def export(request: Request) -> Response:
            """Decode an ExportTraceServiceRequest and keep its spans."""
            message = trace_service_pb2.ExportTraceServiceRequest.FromString(await request.body())
            self.spans += list(_spans(message))
            reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            return Response(reply, media_type="application/x-protobuf")

        return app

    def named(self, name: str) -> list[ReceivedSpan]:
        """The received spans called ``name``."""
        return [span for span in self.spans if span.name == name]


def _spans(message: trace_service_pb2.ExportTraceServiceRequest) -> list[ReceivedSpan]:
    found = []
    for resource_spans in message.resource_spans:
        attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            found += [
                ReceivedSpan(
                    name=span.name,
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex(),
                    service=attributes.get("service.name", ""),
                )
                for span in scope_spans.spans
            ]
    return found
