"""Test harness: the controller app with runtime=kubernetes on the shared fake apiserver.

Models are applied to the apiserver as kubectl would; a test-side kubelet plays the
Deployment controller and marks pods Ready on their podIP. Every wait is on a condition.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flexinfer_common.bus import topics
from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.serving import serve_in_background
from flexinfer_common.testing.kube_apiserver import KubeApiServer
from flexinfer_controller.app import create_app
from flexinfer_controller.core.activation_trace import ActivationTraces
from flexinfer_controller.kube_settings import KubernetesSettings
from flexinfer_controller.runtime.kubernetes.factory import kubernetes_models
from flexinfer_controller.runtime.kubernetes.kubelet import Kubelet, running_kubelet
from flexinfer_controller.settings import ControllerSettings
from flexinfer_controller.testing import demand, eventually


def model_body(name: str = "tiny", **serverless: Any) -> dict[str, Any]:
    """A CPU reference Model, scaled to zero when idle."""
    return {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "Model",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "backend": "reference",
            "source": "file:///var/lib/flexinfer/models/tiny",
            "gpu": {"vendor": "cpu"},
            "serverless": {"idleTimeout": "300s", **serverless},
        },
    }


def writes(api: KubeApiServer, resource: str) -> int:
    """Updates and patches of ``resource`` so far."""
    return api.count("update", resource) + api.count("patch", resource)


@dataclass
class Cluster:
    """The fake apiserver, its kubelet, and the controller's bus."""

    api: KubeApiServer
    kubelet: Kubelet
    bus: MemoryBus
    url: str = ""
    """The controller app's base URL (admin API, /metrics)."""

    def model(self, name: str = "tiny") -> dict[str, Any] | None:
        """The stored Model object."""
        return self.api.get("models", "default", name)

    def status(self, name: str = "tiny") -> dict[str, Any]:
        """Its status (empty before the first write)."""
        found = self.model(name)
        return dict((found or {}).get("status") or {})

    def pods(self) -> list[dict[str, Any]]:
        """The engine pods."""
        return self.api.objects("pods", "default")

    async def wait_phase(self, phase: str, name: str = "tiny", timeout_s: float = 15) -> None:
        """Until a reconcile of the current generation wrote ``phase``."""

        def reached() -> bool:
            found = self.model(name) or {}
            status = found.get("status") or {}
            current = status.get("observedGeneration") == found.get("metadata", {}).get(
                "generation"
            )
            return current and status.get("phase") == phase

        await eventually(reached, timeout_s)

    async def demand(self, traceparent: str | None = None) -> None:
        """A proxy's DemandEvent for default/tiny (from a traced request: ``traceparent``)."""
        event = demand().model_copy(update={"traceparent": traceparent})
        await self.bus.publish(topics.DEMAND, event.model_dump(mode="json"))


@asynccontextmanager
async def controller(
    api: KubeApiServer,
    bus: MemoryBus,
    activations: ActivationTraces | None = None,
    **overrides: Any,
) -> AsyncIterator[str]:
    """The controller app with runtime=kubernetes on ``api``, until the block ends; its URL.
    ``activations``: scale-up spans recorded there (a tracer of the test's)."""
    values: dict[str, Any] = {
        "port": 0, "runtime": "kubernetes", "data_dir": Path("/nonexistent/flexinfer"),
        "kubernetes": KubernetesSettings(host=api.url, namespaces=["default"]),
        "resync_interval_s": 3600.0, "crash_loop_limit": 3, "crash_backoff_initial_s": 0.05,
        "crash_backoff_max_s": 0.2,
    }  # fmt: skip
    values.update(overrides)
    settings = ControllerSettings(**values)
    async with kubernetes_models(settings) as (store, feed):
        app = create_app(settings, bus=bus, store=store, feed=feed)
        if activations is not None:
            app.state.controller.activations = activations
        async with serve_in_background(app) as url:
            yield url


@asynccontextmanager
async def running_cluster(
    api: KubeApiServer, activations: ActivationTraces | None = None, **overrides: Any
) -> AsyncIterator[Cluster]:
    """A running kubelet and controller on ``api``."""
    bus = MemoryBus()
    try:
        async with (
            running_kubelet(api) as kubelet,
            controller(api, bus, activations, **overrides) as url,
        ):
            yield Cluster(api, kubelet, bus, url)
    finally:
        await bus.close()
