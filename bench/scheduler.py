"""Scheduler extender latency: /filter and /prioritize over HTTP on loopback, against a ceiling.

The real service process (``python -m flexinfer_scheduler``, uvicorn) reads its nodes from
an in-process fake apiserver through its node informer, exactly as on a cluster, and is
asked as kube-scheduler asks with ``nodeCacheCapable: true``: ExtenderArgs with the pod and
``--sizes`` node names (a mix of GPU nodes, nodes too full for the pod, an unsupported
architecture and CPU nodes). One keep-alive connection sends the requests one at a time;
each latency is from the first byte sent to the last byte read.

The ceilings are further processes answering a precomputed body: the real service's own
answer to the same request, so all move the same bytes, each on a thinner stack
(``--ceilings``, all by default): ``fastapi``, FastAPI routes through the same
``serve_app`` (the service's stack until 2026-12-04, and the only ceiling before);
``lean``, the service's stack now (since 2026-12-04, midday: the verbs served by
``VerbsPipeline`` on ``flexinfer_common.http1``'s protocol, with the request metrics; until
then FastAPI with ``VerbsFastPath`` before its routing); ``asgi``, a bare ASGI
callable through ``serve_app`` (uvicorn, httptools, uvloop); ``floor``, an asyncio protocol
on uvloop with HTTP parsed by hand (no uvicorn): the physical floor of Python on this
machine. All take turns within each round, who goes first rotating (since 2026-12-03
evening: before, all of the service's rounds ran, then all of the ceiling's, and the load
of the shared machine could differ between the halves). No answer is cached
across requests in the service; each is computed from the request (what it keeps is per
node and per benchmark ConfigMap, refreshed by the informers). ``--tps kubernetes``
(default) gives the pod a backend, model and benchmark ConfigMaps, so each /prioritize
looks them up (in the service's ConfigMap informer since 2026-12-03; before, two GETs to
the apiserver); ``--tps none`` measures the placement alone.

    python bench/scheduler.py [--sizes 10,100,1000,5000] [--requests 400] [--tps none]
        [--ceilings fastapi,lean,asgi,floor]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

from fastapi import FastAPI, Request, Response
from keepalive_client import KeepAliveClient
from starlette.types import ASGIApp, Receive, Scope, Send

from flexinfer_common.http1.server import HttpProtocol
from flexinfer_common.placement import benchmark_key, keys
from flexinfer_common.service import run_main, serve_app
from flexinfer_common.settings import TelemetrySettings
from flexinfer_common.telemetry import setup_telemetry
from flexinfer_common.testing.kube_apiserver import KubeApiServer
from flexinfer_common.web import install_error_handlers
from flexinfer_scheduler.settings import SchedulerSettings
from flexinfer_scheduler.verbs import Answer, BodyLimits, Verb, VerbsPipeline

NAMESPACE = "bench"


def node(i: int) -> dict[str, Any]:
    """Node ``i``: most fit, every 7th is full, every 11th an old arch, every 13th no GPU."""
    labels = {keys.GPU_VENDOR: "NVIDIA", keys.GPU_ARCH: "sm_89", keys.GPU_VRAM: "24Gi"}
    if i % 11 == 0:
        labels[keys.GPU_ARCH] = "sm_60"
    if i % 13 == 0:
        labels = {}
    free = 2000 if i % 7 == 0 else 4000 + (i * 37) % 20000
    annotations = {
        keys.GPU_FREE_MEMORY: str(free),
        keys.GPU_UTIL: str(i % 100),
        keys.KV_CACHE_USAGE: f"{(i % 97) / 97:.3f}",
        keys.COST: str(i % 5),
    }
    return {"metadata": {"name": f"node-{i:05d}", "labels": labels, "annotations": annotations}}


def pod(tps: bool) -> dict[str, Any]:
    """The engine pod being placed."""
    annotations = {keys.VRAM_ESTIMATE_MB: "3000"}
    if tps:
        annotations |= {keys.BACKEND: "vllm", keys.MODEL: "bench-model"}
    return {
        "metadata": {"name": "engine-0", "namespace": NAMESPACE, "annotations": annotations},
        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }


def ceiling_app(bodies: Path) -> FastAPI:
    """Routes answering the recorded bodies (``bodies/<name>``) to whatever they are sent."""
    answers = {p.name: p.read_bytes() for p in bodies.iterdir()}
    app = FastAPI(docs_url=None, redoc_url=None)

    @app.post("/{name}")
    async def answer(name: str, request: Request) -> Response:
        await request.body()
        return Response(answers.get(name, b"{}"), media_type="application/json")

    return app


def asgi_ceiling_app(bodies: Path) -> ASGIApp:
    """A bare ASGI callable (no FastAPI, no Starlette) answering the recorded bodies."""
    answers = {f"/{p.name}": p.read_bytes() for p in bodies.iterdir()}
    headers = [(b"content-type", b"application/json")]

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # no lifespan to run
        more = True
        while more:
            message = await receive()
            more = message.get("more_body", False)
        body = answers.get(scope["path"], b"{}")
        length = [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers + length})
        await send({"type": "http.response.body", "body": body})

    return app


class FloorProtocol(asyncio.Protocol):
    """The physical floor: HTTP/1.1 keep-alive parsed by hand on the same event loop (no
    uvicorn, no ASGI), answering the recorded bodies. Enough HTTP for this client only."""

    def __init__(self, answers: dict[bytes, bytes]) -> None:
        self.answers = answers
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport to answer on."""
        self.transport = cast(asyncio.Transport, transport)  # uvloop's does not subclass it

    def data_received(self, data: bytes) -> None:
        """Answer every complete request in the buffer."""
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].split(b"\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            body = self.answers.get(head[0].split(b" ")[1], b"{}")
            assert self.transport is not None
            self.transport.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body
            )


async def serve_floor(answers: dict[bytes, bytes], port: int) -> None:
    """Serve ``FloorProtocol`` on ``port`` until killed."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: FloorProtocol(answers), "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def lean_ceiling_app(bodies: Path) -> FastAPI:
    """The service's own stack (since 2026-12-04, midday) without its work: a FastAPI app
    with the same error handlers and request metrics, whose ``VerbsPipeline`` answers the
    recorded bodies on ``flexinfer_common.http1``'s protocol, as in the service."""
    app = ceiling_app(bodies)
    install_error_handlers(app)
    telemetry = setup_telemetry(app, "ceiling", TelemetrySettings())
    answers = {f"/{p.name}": p.read_bytes() for p in bodies.iterdir()}

    def recorded(path: str) -> Verb:
        async def verb(body: bytes) -> Answer:
            return Answer(200, answers[path])

        return verb

    verbs = {path: recorded(path) for path in answers}
    limits = BodyLimits(SchedulerSettings().max_body_bytes, SchedulerSettings().body_timeout_s)
    app.pipeline = VerbsPipeline(  # type: ignore[attr-defined]
        verbs, tokens=None, limits=limits, requests=telemetry.requests
    )
    return app


CEILINGS = {
    "fastapi": "FastAPI routes through serve_app (the service's stack before 2026-12-04)",
    "lean": "the service's stack since 2026-12-04 midday: http1's protocol, VerbsPipeline",
    "asgi": "a bare ASGI callable through serve_app (uvicorn, httptools, uvloop)",
    "floor": "an asyncio protocol on uvloop, HTTP parsed by hand (no uvicorn)",
}


def serve_ceiling(kind: str, bodies: Path, port: int) -> None:
    """Serve the ``kind`` of ceiling until killed (the ceiling subprocess)."""

    files = list(bodies.iterdir())

    async def serve(_: SchedulerSettings) -> None:
        if kind == "floor":
            await serve_floor({f"/{p.name}".encode(): p.read_bytes() for p in files}, port)
            return
        apps: dict[str, Callable[[Path], ASGIApp]]
        apps = {"fastapi": ceiling_app, "lean": lean_ceiling_app, "asgi": asgi_ceiling_app}
        app = apps[kind](bodies)
        http = HttpProtocol if kind == "lean" else None
        await serve_app("ceiling", app, "127.0.0.1", port, http=http)

    # The scheduler's settings only for logging and the event loop: the same as the service.
    sys.exit(run_main("ceiling", lambda: SchedulerSettings(port=port), serve))


def free_port() -> int:
    """A free loopback port."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def process(args: list[str], env: dict[str, str], port: int, ready: str) -> Iterator[None]:
    """A subprocess serving on ``port``, once GET ``ready`` answers 200."""
    proc = subprocess.Popen(args, env=os.environ | env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", ready) if ready else conn.request("POST", "/_", b"")
                if conn.getresponse().status in (200, 500):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"{args} did not come up")
            time.sleep(0.1)
        yield
    finally:
        proc.terminate()
        proc.wait(10)


class StdlibClient:
    """``http.client`` as the client (``--client stdlib``: the figures before 2026-12-04,
    midday; it adds about 0.1 ms a call, see ``keepalive_client``)."""

    def __init__(self, port: int) -> None:
        self._conn = http.client.HTTPConnection("127.0.0.1", port)

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """The answer's status and body."""
        self._conn.request("POST", path, body, {"Content-Type": "application/json"})
        response = self._conn.getresponse()
        return response.status, response.read()

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()


Client = KeepAliveClient | StdlibClient
CLIENTS: dict[str, Callable[[int], Client]] = {"lean": KeepAliveClient, "stdlib": StdlibClient}


def post(conn: Client, path: str, body: bytes) -> tuple[float, bytes]:
    """One request's latency (s) and answer."""
    start = time.perf_counter()
    status, data = conn.post(path, body)
    elapsed = time.perf_counter() - start
    if status != 200:
        raise RuntimeError(f"{path}: {status} {data[:200]!r}")
    return elapsed, data


def measure(
    ports: list[int],
    paths: list[list[tuple[str, bytes]]],
    requests: int,
    client: Callable[[int], Client],
) -> list[dict[str, list[float]]]:
    """Latencies per path (and of the pair) of each server over ``requests`` rounds, after a
    warm-up. The servers take turns within each round (who goes first rotates), so all see
    the same machine: on a shared one the load moves within seconds."""
    conns = [client(port) for port in ports]
    for _ in range(max(requests // 10, 5)):
        for conn, calls in zip(conns, paths, strict=True):
            for path, body in calls:
                post(conn, path, body)
    out: list[dict[str, list[float]]] = [{"pair": []} for _ in ports]
    turns = list(zip(conns, paths, out, strict=True))
    for i in range(requests):
        first = i % len(turns)
        for conn, calls, times in turns[first:] + turns[:first]:
            pair = 0.0
            for path, body in calls:
                elapsed, _ = post(conn, path, body)
                times.setdefault(path, []).append(elapsed)
                pair += elapsed
            times["pair"].append(pair)
    for conn in conns:
        conn.close()
    return out


def pct(values: list[float], q: float) -> float:
    """The q-quantile in ms."""
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 1000) - 1] * 1000


def main() -> None:
    """Run the benchmark and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,100,1000,5000")
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--tps", choices=["kubernetes", "none"], default="kubernetes")
    parser.add_argument(
        "--ceilings",
        default=",".join(CEILINGS),
        help="ceilings measured alongside, comma-separated: "
        + "; ".join(f"{k}: {v}" for k, v in CEILINGS.items()),
    )
    parser.add_argument(
        "--baseline",
        default="",
        metavar="PYTHONPATH",
        help="also measure a second service run from these sources (an A/B against another "
        "commit's scheduler and common packages, in the same rounds)",
    )
    parser.add_argument(
        "--client",
        choices=sorted(CLIENTS),
        default="lean",
        help="the measuring client: lean (keepalive_client, the default) or stdlib "
        "(http.client, as before 2026-12-04 midday)",
    )
    parser.add_argument("--serve-ceiling", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--kind", default="fastapi", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_ceiling:
        serve_ceiling(args.kind, args.serve_ceiling, args.port)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = [k for k in args.ceilings.split(",") if k]
    if unknown := set(kinds) - set(CEILINGS):
        parser.error(f"unknown ceilings {sorted(unknown)}; known: {', '.join(CEILINGS)}")
    tps = args.tps == "kubernetes"
    requests, results = run(sizes, kinds, tps, args.requests, args.client, args.baseline)
    columns = ["service"] + (["baseline"] if args.baseline else []) + kinds
    report(sizes, columns, results, requests, args)


def run(
    sizes: list[int],
    kinds: list[str],
    tps: bool,
    rounds: int,
    client: str = "lean",
    baseline: str = "",
) -> tuple[dict[int, list[tuple[str, bytes]]], dict[int, list[dict[str, list[float]]]]]:
    """Each size's requests, and its latencies: the service's first, then the baseline
    service's (if its PYTHONPATH is given), then each ceiling's."""
    with KubeApiServer() as api, tempfile.TemporaryDirectory() as tmp:
        for i in range(max(sizes)):
            api.create("nodes", node(i))
        api.create("namespaces", {"metadata": {"name": NAMESPACE}})
        device = "vendor=NVIDIA,arch=sm_89,vram=24Gi,count=,int4="
        data = {benchmark_key("vllm", "bench-model", device): "120"}
        api.create(
            "configmaps",
            {"metadata": {"name": "flexinfer-benchmark-results"}, "data": data},
            NAMESPACE,
        )
        bodies = Path(tmp)
        sched_port = free_port()
        env = {
            "FLEXINFER_SCHEDULER_PORT": str(sched_port),
            "FLEXINFER_SCHEDULER_KUBERNETES": "true",
            "FLEXINFER_SCHEDULER_KUBERNETES_HOST": api.url,
            "FLEXINFER_LOG_LEVEL": "warning",
        }
        requests: dict[int, list[tuple[str, bytes]]] = {}
        results: dict[int, list[dict[str, list[float]]]] = {}
        with process([sys.executable, "-m", "flexinfer_scheduler"], env, sched_port, "/readyz"):
            for size in sizes:
                names = [f"node-{i:05d}" for i in range(size)]
                body = json.dumps({"pod": pod(tps), "nodenames": names}).encode()
                requests[size] = [("/filter", body), ("/prioritize", body)]
                conn = KeepAliveClient(sched_port)
                for path, b in requests[size]:
                    (bodies / f"{size}{path.replace('/', '-')}").write_bytes(post(conn, path, b)[1])
                conn.close()
            with contextlib.ExitStack() as stack:
                ports = [sched_port]
                if baseline:
                    port = free_port()
                    other = env | {"FLEXINFER_SCHEDULER_PORT": str(port), "PYTHONPATH": baseline}
                    cmd = [sys.executable, "-m", "flexinfer_scheduler"]
                    stack.enter_context(process(cmd, other, port, "/readyz"))
                    ports.append(port)
                services = len(ports)
                for kind in kinds:
                    port = free_port()
                    cmd = [sys.executable, __file__, "--serve-ceiling", str(bodies)]
                    stack.enter_context(
                        process([*cmd, "--kind", kind, "--port", str(port)], {}, port, "")
                    )
                    ports.append(port)
                for size in sizes:
                    recorded = [(f"/{size}{p.replace('/', '-')}", b) for p, b in requests[size]]
                    calls = [requests[size]] * services + [recorded] * len(kinds)
                    measured = measure(ports, calls, rounds, CLIENTS[client])
                    results[size] = measured[:services] + [
                        {
                            "/filter": m[recorded[0][0]],
                            "/prioritize": m[recorded[1][0]],
                            "pair": m["pair"],
                        }
                        for m in measured[services:]
                    ]
    return requests, results


def report(
    sizes: list[int],
    columns: list[str],
    results: dict[int, list[dict[str, list[float]]]],
    requests: dict[int, list[tuple[str, bytes]]],
    args: argparse.Namespace,
) -> None:
    """The Markdown table: p50/p99 of each call and of the pair, per server measured."""
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    code = f"; baseline PYTHONPATH: {args.baseline}" if args.baseline else ""
    setup = f"requests per size: {args.requests}; tps source: {args.tps}; client: {args.client}"
    print(f"{setup}; load after: {load}{code}\n")
    heads = "".join(f" | {k} p50 / p99 (ms)" for k in columns)
    print(f"| nodes | request bytes | call{heads} |")
    print("|---|---|---|" + "---|" * len(columns))
    for size in sizes:
        for call in ("/filter", "/prioritize", "pair"):
            cells = [f"{pct(r[call], 0.5):.2f} / {pct(r[call], 0.99):.2f}" for r in results[size]]
            size_bytes = len(requests[size][0][1])
            print(f"| {size} | {size_bytes} | {call} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
