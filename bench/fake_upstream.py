"""A very fast fake OpenAI upstream: a raw asyncio protocol on uvloop, parsed with httptools.

Every POST gets the same chat completion: as JSON, or, when the body asks for
``"stream": true``, as 8 SSE chunks and ``data: [DONE]`` (chunked encoding). Connections are
kept alive. A request header ``x-fake-delay-ms: N`` spaces the stream's chunks N ms apart
(slow streams, for the memory benchmark). uvicorn would cost about 3x more per request and
hide the proxies' own cost.

    python bench/fake_upstream.py [--host 127.0.0.1] [--port 0] [--ready-file PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
from pathlib import Path
from typing import cast

import httptools
import uvloop

MODEL = "fake"
CHUNKS = 8


def _completion_body() -> bytes:
    message = {"role": "assistant", "content": "Hello! How can I help you today?"}
    return json.dumps(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 1700000000,
            "model": MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 9, "total_tokens": 18},
        },
        separators=(",", ":"),
    ).encode()


def _sse_chunk(index: int) -> bytes:
    delta = {"content": f"tok{index} "} if index else {"role": "assistant", "content": ""}
    finish = "stop" if index == CHUNKS - 1 else None
    data = json.dumps(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        },
        separators=(",", ":"),
    ).encode()
    event = b"data: " + data + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


BODY = _completion_body()
JSON_RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
    % (len(BODY), BODY)
)
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)
SSE_CHUNKS = [_sse_chunk(i) for i in range(CHUNKS)]
_DONE_EVENT = b"data: [DONE]\n\n"
SSE_DONE = b"%x\r\n%s\r\n0\r\n\r\n" % (len(_DONE_EVENT), _DONE_EVENT)
SSE_RESPONSE = SSE_HEAD + b"".join(SSE_CHUNKS) + SSE_DONE
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
HEALTHY = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
MODELS_BODY = json.dumps(
    {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "fake"}]}
).encode()
MODELS_RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
    % (len(MODELS_BODY), MODELS_BODY)
)


class UpstreamProtocol(asyncio.Protocol):
    """One client connection: parse requests, answer each from prebuilt bytes."""

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.stream = False
        self.delay_s = 0.0
        self.url = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, hence a cast, not a check.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.transport is not None:
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.stream = False
        self.delay_s = 0.0
        self.url = b""

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"x-fake-delay-ms":
            self.delay_s = int(value) / 1000

    def on_body(self, body: bytes) -> None:
        # Good enough for a benchmark: the only clients are our own load generators.
        if b'"stream":true' in body.replace(b" ", b""):
            self.stream = True

    def on_message_complete(self) -> None:
        transport = self.transport
        if transport is None:
            return
        if self.parser.get_method() == b"GET":
            if self.url.startswith(b"/v1/models"):
                answer = MODELS_RESPONSE
            elif self.url.startswith(b"/health"):
                answer = HEALTHY  # vllm-router waits for its workers' /health
            else:
                answer = NOT_FOUND
            transport.write(answer)
        elif not self.stream:
            transport.write(JSON_RESPONSE)
        elif self.delay_s <= 0:
            transport.write(SSE_RESPONSE)
        else:
            transport.write(SSE_HEAD + SSE_CHUNKS[0])
            loop = asyncio.get_running_loop()
            loop.call_later(self.delay_s, self._slow_chunk, transport, 1)

    def _slow_chunk(self, transport: asyncio.Transport, index: int) -> None:
        if transport.is_closing():
            return
        if index < CHUNKS:
            transport.write(SSE_CHUNKS[index])
            loop = asyncio.get_running_loop()
            loop.call_later(self.delay_s, self._slow_chunk, transport, index + 1)
        else:
            transport.write(SSE_DONE)


async def serve(host: str, port: int, ready_file: Path | None) -> None:
    """Serve until SIGINT/SIGTERM; write ``http://host:port`` to ``ready_file`` when ready."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(4096)
    server = await loop.create_server(UpstreamProtocol, sock=sock, backlog=4096)
    url = f"http://{host}:{sock.getsockname()[1]}"
    if ready_file is not None:
        tmp = ready_file.with_suffix(".tmp")
        tmp.write_text(url + "\n")
        os.replace(tmp, ready_file)
    else:
        print(url, flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    """Parse flags and serve."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ready-file", type=Path)
    args = parser.parse_args(argv)
    uvloop.run(serve(args.host, args.port, args.ready_file))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
