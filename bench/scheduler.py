"""Scheduler extender latency: /filter and /prioritize over HTTP on loopback, against a ceiling.

The real service process (``python -m flexinfer_scheduler``, uvicorn) reads its nodes from
an in-process fake apiserver through its node informer, exactly as on a cluster, and is
asked as kube-scheduler asks with ``nodeCacheCapable: true``: ExtenderArgs with the pod and
``--sizes`` node names (a mix of GPU nodes, nodes too full for the pod, an unsupported
architecture and CPU nodes). One keep-alive connection sends the requests one at a time;
each latency is from the first byte sent to the last byte read.

The ceiling is a second process on the same stack (FastAPI, the same ``serve_app``) whose
routes read the request and answer a precomputed body: the real service's own answer to the
same request, so both move the same bytes. The two take turns within each round (since
2026-12-03 evening: before, all of the service's rounds ran, then all of the ceiling's, and
the load of the shared machine could differ between the halves). No answer is cached
across requests in the service; each is computed from the request (what it keeps is per
node and per benchmark ConfigMap, refreshed by the informers). ``--tps kubernetes``
(default) gives the pod a backend, model and benchmark ConfigMaps, so each /prioritize
looks them up (in the service's ConfigMap informer since 2026-12-03; before, two GETs to
the apiserver); ``--tps none`` measures the placement alone.

    python bench/scheduler.py [--sizes 10,100,1000,5000] [--requests 400] [--tps none]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, Response

from flexinfer_common.placement import benchmark_key, keys
from flexinfer_common.service import run_main, serve_app
from flexinfer_common.testing.kube_apiserver import KubeApiServer
from flexinfer_scheduler.settings import SchedulerSettings

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


def serve_ceiling(bodies: Path, port: int) -> None:
    """Serve ``ceiling_app`` until killed (the ceiling subprocess)."""

    async def serve(_: SchedulerSettings) -> None:
        await serve_app("ceiling", ceiling_app(bodies), "127.0.0.1", port)

    # The scheduler's settings only for logging and the event loop: the same as the service.
    sys.exit(run_main("ceiling", lambda: SchedulerSettings(port=port), serve))


def free_port() -> int:
    """A free loopback port."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
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


def post(conn: http.client.HTTPConnection, path: str, body: bytes) -> tuple[float, bytes]:
    """One request's latency (s) and answer."""
    start = time.perf_counter()
    conn.request("POST", path, body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    elapsed = time.perf_counter() - start
    if response.status != 200:
        raise RuntimeError(f"{path}: {response.status} {data[:200]!r}")
    return elapsed, data


def measure(
    ports: tuple[int, int], paths: tuple[list[tuple[str, bytes]], ...], requests: int
) -> tuple[dict[str, list[float]], ...]:
    """Latencies per path (and of the pair) of each server over ``requests`` rounds, after a
    warm-up. The servers take turns within each round (who goes first alternates), so both
    see the same machine: on a shared one the load moves within seconds."""
    conns = [http.client.HTTPConnection("127.0.0.1", port) for port in ports]
    for _ in range(max(requests // 10, 5)):
        for conn, calls in zip(conns, paths, strict=True):
            for path, body in calls:
                post(conn, path, body)
    out: list[dict[str, list[float]]] = [{"pair": []} for _ in ports]
    for i in range(requests):
        turns = list(zip(conns, paths, out, strict=True))
        for conn, calls, times in turns if i % 2 == 0 else reversed(turns):
            pair = 0.0
            for path, body in calls:
                elapsed, _ = post(conn, path, body)
                times.setdefault(path, []).append(elapsed)
                pair += elapsed
            times["pair"].append(pair)
    for conn in conns:
        conn.close()
    return tuple(out)


def pct(values: list[float], q: float) -> float:
    """The q-quantile in ms."""
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 1000) - 1] * 1000


def main() -> None:
    """Run the benchmark and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,100,1000,5000")
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--tps", choices=["kubernetes", "none"], default="kubernetes")
    parser.add_argument("--serve-ceiling", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_ceiling:
        serve_ceiling(args.serve_ceiling, args.port)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    tps = args.tps == "kubernetes"
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
        sched_port, ceil_port = free_port(), free_port()
        env = {
            "FLEXINFER_SCHEDULER_PORT": str(sched_port),
            "FLEXINFER_SCHEDULER_KUBERNETES": "true",
            "FLEXINFER_SCHEDULER_KUBERNETES_HOST": api.url,
            "FLEXINFER_LOG_LEVEL": "warning",
        }
        requests: dict[int, list[tuple[str, bytes]]] = {}
        results: dict[int, dict[str, list[float]]] = {}
        ceiling: dict[int, dict[str, list[float]]] = {}
        ceiling_args = [
            sys.executable,
            __file__,
            "--serve-ceiling",
            str(bodies),
            "--port",
            str(ceil_port),
        ]
        with process([sys.executable, "-m", "flexinfer_scheduler"], env, sched_port, "/readyz"):
            for size in sizes:
                names = [f"node-{i:05d}" for i in range(size)]
                body = json.dumps({"pod": pod(tps), "nodenames": names}).encode()
                requests[size] = [("/filter", body), ("/prioritize", body)]
                conn = http.client.HTTPConnection("127.0.0.1", sched_port)
                for path, b in requests[size]:
                    (bodies / f"{size}{path.replace('/', '-')}").write_bytes(post(conn, path, b)[1])
                conn.close()
            with process(ceiling_args, {}, ceil_port, ""):
                for size in sizes:
                    paths = [(f"/{size}{p.replace('/', '-')}", b) for p, b in requests[size]]
                    service, measured = measure(
                        (sched_port, ceil_port), (requests[size], paths), args.requests
                    )
                    results[size] = service
                    ceiling[size] = {
                        "/filter": measured[paths[0][0]],
                        "/prioritize": measured[paths[1][0]],
                        "pair": measured["pair"],
                    }
    report(sizes, results, ceiling, requests, args)


def report(
    sizes: list[int],
    results: dict[int, dict[str, list[float]]],
    ceiling: dict[int, dict[str, list[float]]],
    requests: dict[int, list[tuple[str, bytes]]],
    args: argparse.Namespace,
) -> None:
    """The Markdown table: p50/p99 of each call and of the pair, service and ceiling."""
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"requests per size: {args.requests}; tps source: {args.tps}; load after: {load}\n")
    print(
        "| nodes | request bytes | call | service p50 (ms) | service p99 (ms) "
        "| ceiling p50 (ms) | ceiling p99 (ms) | p99 / ceiling p99 |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for size in sizes:
        for call in ("/filter", "/prioritize", "pair"):
            s, c = results[size][call], ceiling[size][call]
            size_bytes = len(requests[size][0][1])
            print(
                f"| {size} | {size_bytes} | {call} | {pct(s, 0.5):.2f} | {pct(s, 0.99):.2f} "
                f"| {pct(c, 0.5):.2f} | {pct(c, 0.99):.2f} | {pct(s, 0.99) / pct(c, 0.99):.2f} |"
            )


if __name__ == "__main__":
    main()
