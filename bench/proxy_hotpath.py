"""The proxy's hot path without sockets: Python CPU per request, call counts, garbage cycles.

The real proxy app (``flexinfer proxy --static`` wiring) serves requests whose bytes are fed
straight into its HTTP protocol, and whose answers are fed into a pooled upstream
connection, both over fake transports: no syscalls, no other process, only the event-loop
turns the request's task needs. What remains is the Python work of one request, which the
wrk benchmark (bench/proxy.py) cannot separate from the kernel's.

    python bench/proxy_hotpath.py [--requests 20000] [--profile tottime|ncalls] [--cycles]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import time
from collections import Counter
from typing import Any

import uvloop
from uvicorn.config import Config
from uvicorn.server import ServerState

from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.http1.server import HttpProtocol
from flexinfer_proxy.app import create_app
from flexinfer_proxy.settings import ProxySettings
from flexinfer_proxy.static import StaticEndpoint, StaticStore
from flexinfer_proxy.transport.h1 import H1Transport, HostPool
from flexinfer_proxy.transport.h1_connection import H1Connection

ENGINE = "http://127.0.0.1:9"
BODY = b'{"model": "fake", "messages": [{"role": "user", "content": "Say hello."}]}'
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
    b"Content-Type: application/json\r\nAuthorization: Bearer sk-bench\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
)
ANSWER_BODY = (
    b'{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"fake","choices":'
    b'[{"index":0,"message":{"role":"assistant","content":"Hello!"},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}'
)
ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(ANSWER_BODY),
    ANSWER_BODY,
)


class FakeTransport:
    """Collects what is written; enough of a transport for both protocols."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        """Keep the bytes."""
        self.written.append(data)

    def is_closing(self) -> bool:
        """Whether close() was called."""
        return self.closing

    def close(self) -> None:
        """Mark closed."""
        self.closing = True

    def pause_reading(self) -> None:
        """Nothing to pause."""

    def resume_reading(self) -> None:
        """Nothing to resume."""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """Loopback addresses."""
        return {"sockname": ("127.0.0.1", 8080), "peername": ("127.0.0.1", 50000)}.get(
            name, default
        )


async def settle(done: Any) -> None:
    """Run loop turns until ``done()``: what the request's task needs to go on."""
    for _ in range(100):
        if done():
            return
        await asyncio.sleep(0)
    raise SystemExit("the request did not progress")


async def run(args: argparse.Namespace) -> None:
    """Build the app, wire the fake connections, measure."""
    # Nothing listens on the engine's port: a health check during a long (profiled) run
    # would mark it down and queue the requests, so none runs while we measure.
    settings = ProxySettings(health_interval_s=24 * 3600)
    store = StaticStore.from_declarations([StaticEndpoint("fake", ENGINE)], settings.namespace)
    app: Any = create_app(settings, bus=MemoryBus(), store=store)
    async with app.router.lifespan_context(app):
        core = app.pipeline.core
        if not core.catalog.loaded:  # the lifespan's first store read fills it
            raise SystemExit("the proxy did not load its models")
        core.table.set_health("default/fake", ENGINE, True)  # nothing listens on port 9
        config = Config(app, http=HttpProtocol)
        config.load()
        client = FakeTransport()
        protocol = HttpProtocol(config, ServerState(), {})
        protocol.connection_made(client)  # type: ignore[arg-type]
        transport: H1Transport = app.pipeline.transport
        pool = transport._hosts[ENGINE] = HostPool(transport, ENGINE)
        engine = FakeTransport()
        conn = H1Connection(pool, settings.read_timeout_s)
        conn.connection_made(engine)  # type: ignore[arg-type]
        conn.idle_since = time.monotonic()
        pool.idle.append(conn)
        transport.open.add(conn)

        async def one() -> None:
            sent, answered = len(engine.written), len(client.written)
            protocol.data_received(REQUEST)
            await settle(lambda: len(engine.written) > sent)
            conn.data_received(ANSWER)
            await settle(lambda: len(client.written) > answered and protocol.running is None)

        for _ in range(1000):
            await one()
        if not client.written[-1].startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"unexpected answer: {client.written[-1][:80]!r}")
        if args.cycles:
            await cycles(one)
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(args.requests):
                await one()
            profiler.disable()
            pstats.Stats(profiler).sort_stats(args.profile).print_stats(30)
        client.written.clear()
        engine.written.clear()
        started = time.process_time()
        for _ in range(args.requests):
            await one()
        spent = time.process_time() - started
        print(f"{spent / args.requests * 1e6:.1f} µs of CPU per request ({args.requests} requests)")


async def cycles(one: Any) -> None:
    """Objects per request that only the cycle collector frees (goal: 0)."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(1000):
            await one()
        found = gc.collect()
        kinds = Counter(type(o).__name__ for o in gc.garbage).most_common(8)
        print(f"garbage in cycles: {found / 1000:.1f} objects per request {kinds}")
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def main() -> None:
    """Parse flags and run."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--profile", choices=["tottime", "cumtime", "ncalls"])
    parser.add_argument("--cycles", action="store_true", help="count garbage cycles")
    uvloop.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
