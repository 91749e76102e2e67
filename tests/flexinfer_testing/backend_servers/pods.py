"""Engine pods that really serve: the vLLM stand-in run as each Ready pod's container.

The fake apiserver's test kubelet only marks pods Ready; nothing listens at their podIP.
``running_pod_engines`` plays the container runtime for vLLM pods: for each Ready engine
pod it starts ``vllm serve`` (the stand-in) with the pod's rendered container args and env,
bound to the pod's IP (the kubelet hands out loopback ones, ``Kubelet.pod_network``), and
stops it when the pod goes. The model path inside the container does not exist here, so
``--model`` points at a local directory instead; every other flag is the pod's own.
``mounts`` plays the pods' volumes: a path inside the container (``/models``) -> the local
directory the engine reads it from.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from flexinfer_common.testing.kube_apiserver import KubeApiServer
from flexinfer_common.testing.kube_apiserver.syncing import sync_after_changes
from flexinfer_testing.backend_servers import StandIns

Obj = dict[str, Any]


def loopback_network() -> str:
    """A random ``127.x.y.`` prefix: pods of one test get their own addresses, so port 8000
    of each is free whatever else runs on this machine."""
    return f"127.{random.randint(2, 254)}.{random.randint(2, 254)}."


def container_argv(pod: Obj, vllm: Path, model_dir: Path) -> list[str]:
    """``vllm serve MODEL <the container's args>`` with ``--host`` set to the podIP."""
    args = list(pod["spec"]["containers"][0].get("args") or [])
    at = args.index("--model")
    del args[at : at + 2]
    host = args.index("--host")
    args[host + 1] = pod["status"]["podIP"]
    return [str(vllm), "serve", str(model_dir), *args]


def container_env(pod: Obj, mounts: Mapping[str, Path] | None = None) -> dict[str, str]:
    """The container's literal env on top of this process's (and its mounts for the
    stand-in, ``FLEXINFER_STANDIN_MOUNTS``)."""
    env = pod["spec"]["containers"][0].get("env") or []
    out = {**os.environ, **{e["name"]: e["value"] for e in env if "value" in e}}
    if mounts:
        out["FLEXINFER_STANDIN_MOUNTS"] = json.dumps({k: str(v) for k, v in mounts.items()})
    return out


def _serving(pod: Obj) -> bool:
    status = pod.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return ready and bool(status.get("podIP")) and not pod["metadata"].get("deletionTimestamp")


class PodEngines:
    """One stand-in process per serving pod, by pod name."""

    def __init__(
        self,
        api: KubeApiServer,
        standins: StandIns,
        model_dir: Path,
        mounts: Mapping[str, Path] | None = None,
    ) -> None:
        self.api = api
        self._vllm = standins.bin_dir / "vllm"
        self._model_dir = model_dir
        self._mounts = dict(mounts or {})
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def sync(self) -> None:
        """Start engines of new serving pods, stop those of pods gone."""
        serving = {p["metadata"]["name"]: p for p in self.api.objects("pods") if _serving(p)}
        for name in set(self.processes) - set(serving):
            self.stop(name)
        for name, pod in serving.items():
            if name not in self.processes:
                self.start(pod)

    def start(self, pod: Obj) -> None:
        """Run the pod's container (again, when it restarts in place)."""
        argv = container_argv(pod, self._vllm, self._model_dir)
        self.processes[pod["metadata"]["name"]] = subprocess.Popen(
            argv,
            env=container_env(pod, self._mounts),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self, name: str) -> None:
        """Kill the pod's engine and reap it."""
        process = self.processes.pop(name)
        process.kill()
        process.wait(timeout=10)

    def close(self) -> None:
        """Stop every engine."""
        for name in list(self.processes):
            self.stop(name)


@contextlib.asynccontextmanager
async def running_pod_engines(
    api: KubeApiServer,
    standins: StandIns,
    model_dir: Path,
    mounts: Mapping[str, Path] | None = None,
) -> AsyncIterator[PodEngines]:
    """PodEngines syncing after every change on the apiserver, until the block ends."""
    engines = PodEngines(api, standins, model_dir, mounts)
    try:
        async with sync_after_changes(api, engines.sync):
            yield engines
    finally:
        engines.close()
