"""Engine pods that sleep: a stand-in engine with sleep routes at each Ready pod's podIP.

The fake apiserver's test kubelet only marks pods Ready; nothing listens at their podIP.
``running_sleepy_engines`` plays the container runtime: for each serving engine pod it
serves, at the pod's IP (the kubelet hands out loopback ones, ``Kubelet.pod_network``) and
its ``http`` container port, a stdlib HTTP engine with the reference engine's admin routes:
``POST /sleep?level=N`` and ``POST /wake_up`` (200), health routes that answer 503 while it
sleeps, and ``/metrics`` with ``flexinfer_engine_num_requests_running`` (what a test sets in
``running``: requests a drain waits for). Each engine records the calls it got.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from flexinfer_common.testing.kube_apiserver import KubeApiServer
from flexinfer_common.testing.kube_apiserver.syncing import sync_after_changes

Obj = dict[str, Any]


class SleepyEngine:
    """One pod's engine: its state, the calls it got, and its server thread."""

    def __init__(self, host: str, port: int) -> None:
        self.asleep = False
        self.running = 0
        """Requests it reports in flight on /metrics."""
        self.calls: list[str] = []
        """``POST /sleep?level=1``, ``POST /wake_up``: the admin calls, in order."""
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                engine.calls.append(f"POST {self.path}")
                route = urlsplit(self.path)
                if route.path == "/sleep":
                    level = parse_qs(route.query).get("level", ["1"])[0]
                    engine.asleep = level in ("1", "2")
                elif route.path == "/wake_up":
                    engine.asleep = False
                self._answer(200, b"{}")

            def do_GET(self) -> None:
                if self.path == "/metrics":
                    text = f"flexinfer_engine_num_requests_running {engine.running}\n"
                    self._answer(200, text.encode())
                    return
                self._answer(503 if engine.asleep else 200, b"{}")

            def _answer(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)


def _address(pod: Obj) -> tuple[str, int] | None:
    """The podIP and ``http`` container port of a serving pod; None for any other."""
    status = pod.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    if not ready or not status.get("podIP") or pod["metadata"].get("deletionTimestamp"):
        return None
    for container in pod["spec"].get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == "http":
                return str(status["podIP"]), int(port["containerPort"])
    return None


class SleepyEngines:
    """One engine per serving pod, by pod name (kept while the pod exists, as a container
    is: a pod that goes NotReady still runs its engine)."""

    def __init__(self, api: KubeApiServer) -> None:
        self.api = api
        self.engines: dict[str, SleepyEngine] = {}

    def sync(self) -> None:
        """Start engines of new serving pods, stop those of pods gone."""
        pods = {p["metadata"]["name"]: p for p in self.api.objects("pods")}
        for name in [n for n in self.engines if n not in pods]:
            self.engines.pop(name).close()
        for name, pod in pods.items():
            address = _address(pod)
            if name not in self.engines and address is not None:
                self.engines[name] = SleepyEngine(*address)

    def of(self, model: str) -> list[SleepyEngine]:
        """The engines of Model ``model``'s pods (its Deployment is named after it)."""
        return [e for name, e in self.engines.items() if name.startswith(f"{model}-")]

    def close(self) -> None:
        """Stop every engine."""
        for name in list(self.engines):
            self.engines.pop(name).close()


@contextlib.asynccontextmanager
async def running_sleepy_engines(api: KubeApiServer) -> AsyncIterator[SleepyEngines]:
    """SleepyEngines syncing after every change on the apiserver, until the block ends."""
    engines = SleepyEngines(api)
    try:
        async with sync_after_changes(api, engines.sync):
            yield engines
    finally:
        engines.close()
