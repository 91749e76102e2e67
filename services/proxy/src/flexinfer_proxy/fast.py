"""The fast path: a small request answered from the server's callbacks, with no task.

Most proxied requests are a small JSON body that arrives whole with its head, for a model
with a ready endpoint and an idle pooled connection to it, and get back a small JSON answer
framed by Content-Length. For those, the client connection's parser callback does the
front half (authenticate, find the model, authorize, rate-limit, pick an endpoint) and
writes the request upstream, and the upstream connection's parser callback writes the
answer to the client. No task, coroutine or future is made: on this path a task and its
chain of awaits cost about as much CPU as the proxying itself.

Everything else goes to the ASGI handler from the point already reached, so each decision
is taken once:

- before admission (a check fails, the body is still arriving or exceeds the parse cap,
  the model needs a store lookup): the handler serves the request from the start, and
  answers the same error;
- after admission (a streamed answer was asked for, a cold start, no idle connection):
  ``serve_admitted`` with the endpoint already picked;
- once the answer's head is in, when the answer is a stream, large, or not framed by a
  length: ``relay_admitted``;
- when a kept-alive connection turns out closed by the engine before any answer byte:
  ``serve_admitted`` again, which connects afresh (nothing reached the engine).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from flexinfer_common.bus.topics import EndpointInfo
from flexinfer_common.errors import FlexInferError
from flexinfer_proxy.core.catalog import Target
from flexinfer_proxy.core.routing.base import RouteContext
from flexinfer_proxy.error_answers import error_response, http_status_of
from flexinfer_proxy.extract_http import IncomingRequest, extract_complete, header_value
from flexinfer_proxy.forward import UpstreamError, request_headers, response_headers
from flexinfer_proxy.server_exchange import Exchange
from flexinfer_proxy.upstream import UpstreamResponse

if TYPE_CHECKING:
    from flexinfer_proxy.handler import OpenAIProxy
    from flexinfer_proxy.upstream import UpstreamConnection

log = logging.getLogger(__name__)

MAX_BUFFERED = 256 * 1024
"""Answers up to this size are taken whole and written in one go; longer ones stream."""


class FastPath:
    """Decides, from the server's callbacks, whether a request can be served there."""

    def __init__(self, proxy: OpenAIProxy) -> None:
        self.proxy = proxy

    def serve(self, exchange: Exchange) -> bool:
        """Serve ``exchange`` (or hand it on after admission); False: not taken at all."""
        proxy = self.proxy
        core = proxy.core
        body = exchange.whole_body()
        if proxy.client is None or body is None or len(body) > core.settings.parse_cap_bytes:
            return False
        started = time.monotonic()
        scope = exchange.scope
        try:
            grant = core.auth.authenticate(header_value(scope, b"authorization"))
            request = extract_complete(scope, body, core.settings)
            target = core.catalog.lookup_target(request.name)
            if target is None:
                return False  # the store may know it: the handler reads it
            proxy.admit(grant, target, request)
        except FlexInferError:
            return False  # nothing was done: the handler answers the same error
        exchange.take_body()
        self._admitted(exchange, target, request, started)
        return True

    def _admitted(
        self, exchange: Exchange, target: Target, request: IncomingRequest, started: float
    ) -> None:
        proxy = self.proxy
        core = proxy.core
        key = target.key
        request.rewrite(target.upstream_name)
        ctx = RouteContext(exchange.scope["headers"], request.fields)
        endpoint = core.dispatcher.pick_now(key, core.router.for_model(target.model), ctx)
        conn = None
        if endpoint is not None and not request.stream:
            assert proxy.client is not None
            conn = proxy.client.take_idle(endpoint.url)
        if endpoint is None or conn is None:
            scope = exchange.scope
            work = proxy.serve_admitted(
                scope, exchange.receive, exchange.send, target, request, started, endpoint
            )
            exchange.conn.run_task(exchange, work)
            return
        _Forward(proxy, exchange, target, request, endpoint, started).start(conn)


class _Forward:
    """One request forwarded from callbacks; listens to the upstream answer.

    ``finished`` turns true exactly once: when the answer is written, handed over, or
    abandoned (client gone, engine failed). Loads and activity end then, or in the code
    it was handed to.
    """

    __slots__ = (
        "conn",
        "endpoint",
        "exchange",
        "finished",
        "key",
        "proxy",
        "request",
        "response",
        "started",
        "target",
        "url",
    )

    def __init__(
        self,
        proxy: OpenAIProxy,
        exchange: Exchange,
        target: Target,
        request: IncomingRequest,
        endpoint: EndpointInfo,
        started: float,
    ) -> None:
        self.proxy = proxy
        self.exchange = exchange
        self.target = target
        self.request = request
        self.endpoint = endpoint
        self.url = endpoint.url
        self.started = started
        self.key = target.key
        self.finished = False
        self.conn: UpstreamConnection | None = None
        self.response: UpstreamResponse | None = None

    def start(self, conn: UpstreamConnection) -> None:
        """Count the request in and write it to ``conn``."""
        proxy = self.proxy
        core = proxy.core
        core.activity.begin(self.key, proxy.hot.timings(self.target.model)[0])
        core.loads.begin(self.url)
        scope = self.exchange.scope
        self.exchange.watch_disconnect(self._client_gone)
        self.conn = conn
        request = self.request
        if request.forward_path is not None:
            path = request.forward_path.encode("latin-1", "replace")
        else:
            path = scope["raw_path"]
        if scope["query_string"]:
            path += b"?" + scope["query_string"]
        assert proxy.client is not None
        assert isinstance(request.body, bytes)
        self.response = proxy.client.send_now(
            conn, self.url, b"POST", path, request_headers(scope), request.body, self
        )
        if not self.finished:
            conn.deadline.watch(self)

    # Expirable: the read deadline of the upstream connection.
    def done(self) -> bool:
        """Whether this request no longer waits for the engine."""
        return self.finished

    def set_exception(self, exception: BaseException) -> None:
        """The engine did not answer within the read timeout."""
        if self._finish():
            self._abandon_upstream()
            self._answer_error(UpstreamError(f"upstream {self.url} failed: {exception!r}"))

    # ResponseListener
    def upstream_head(self, response: UpstreamResponse) -> None:
        """Hand a stream or a large answer to the handler's relay."""
        if self.finished:
            return
        length = response.content_length
        content_type = response.content_type or b""
        if (
            length is not None
            and length.isdigit()
            and int(length) <= MAX_BUFFERED
            and not content_type.startswith(b"text/event-stream")
        ):
            return  # taken whole in upstream_done
        self._finish()
        exchange = self.exchange
        work = self.proxy.relay_admitted(
            exchange.scope, exchange.send, self.key, response, self.url
        )
        exchange.conn.run_task(exchange, work)

    def upstream_done(self, response: UpstreamResponse) -> None:
        """Write the whole answer, or deal with the engine's failure."""
        if not self._finish():
            return
        error = response.error
        if error is None:
            status = response.status_code
            body = response.read_buffered()
            headers = response_headers(response.headers)
            response.close()  # the connection goes back to the pool
            self._end(status)
            self._write(status, headers, body)
        elif response.status_code:
            # It broke off mid-answer: as on the relay path, the client's connection is cut.
            self._end(response.status_code)
            response.close()
            self.exchange.conn.close()
        elif self.conn is not None and not self.conn.received:
            self._retry()
        else:
            self._answer_error(UpstreamError(f"upstream {self.url} failed: {error!r}"))

    # Internals
    def _finish(self) -> bool:
        """Mark this forward finished; False if it already was."""
        if self.finished:
            return False
        self.finished = True
        self._stop_watching()
        return True

    def _stop_watching(self) -> None:
        # Also breaks the reference cycles (response <-> listener, exchange <-> callback),
        # so that reference counting frees a request at once instead of the cycle collector.
        if self.conn is not None:
            self.conn.deadline.clear()
        if self.response is not None:
            self.response.listener = None
        self.exchange.watch_disconnect(None)

    def _client_gone(self) -> None:
        if self._finish():
            self._abandon_upstream()
            self._end(None)

    def _abandon_upstream(self) -> None:
        """Drop the connection: the engine may still be answering this request."""
        if self.conn is not None:
            self.conn.response = None
            self.conn.close()

    def _end(self, status: int | None) -> None:
        core = self.proxy.core
        core.loads.end(self.url)
        core.activity.end(self.key)
        if status is not None:
            core.metrics.requests.count(self.key, status)

    def _answer_error(self, exc: FlexInferError) -> None:
        self._end(http_status_of(exc))
        answer = error_response(exc)
        self._write(answer.status_code, answer.raw_headers, bytes(answer.body))

    def _write(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        try:
            self.exchange.respond(status, headers, body)
        except RuntimeError as exc:  # an engine's head the client cannot be sent
            log.warning("cannot relay the answer of %s: %s", self.url, exc)
            self.exchange.conn.close()

    def _retry(self) -> None:
        """The kept-alive connection was closed by the engine: serve on a fresh one.

        ``serve_admitted`` counts the request in again, so it is counted out here.
        """
        self._end(None)
        exchange = self.exchange
        work = self.proxy.serve_admitted(
            exchange.scope,
            exchange.receive,
            exchange.send,
            self.target,
            self.request,
            self.started,
            self.endpoint,
        )
        exchange.conn.run_task(exchange, work)
