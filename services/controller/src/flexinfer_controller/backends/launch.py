"""From a backend's EngineSpec to what a runtime starts: the LaunchSpec and its context."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from flexinfer_controller.core.gpu import GPUAssignment


class InstallProbe(Protocol):
    """Answers whether a backend's server is installed on this machine."""

    def which(self, executable: str) -> str | None:
        """The path of ``executable`` on PATH, None if there is none."""

    def has_module(self, python: str, module: str) -> bool:
        """Whether interpreter ``python`` can import top-level ``module``."""


_FIND_SPEC = "import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)"


class SystemProbe:
    """The real answers: ``shutil.which`` and ``find_spec`` in the engine's interpreter."""

    def __init__(self) -> None:
        self._modules: dict[tuple[str, str], bool] = {}

    def which(self, executable: str) -> str | None:
        """The path of ``executable`` on PATH."""
        return shutil.which(executable)

    def has_module(self, python: str, module: str) -> bool:
        """find_spec here for our own interpreter; asked once of any other (then cached)."""
        key = (python, module)
        if key not in self._modules:
            self._modules[key] = self._find(python, module)
        return self._modules[key]

    @staticmethod
    def _find(python: str, module: str) -> bool:
        if python == sys.executable:
            return importlib.util.find_spec(module) is not None
        try:
            done = subprocess.run(
                [python, "-c", _FIND_SPEC, module], capture_output=True, timeout=30, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        return done.returncode == 0


@dataclass(frozen=True, slots=True)
class StaticProbe:
    """Answers fixed in advance: which executables exist (name -> path), which modules."""

    executables: Mapping[str, str] = field(default_factory=dict)
    modules: frozenset[str] = frozenset()

    def which(self, executable: str) -> str | None:
        """The path given for ``executable``."""
        return self.executables.get(executable)

    def has_module(self, python: str, module: str) -> bool:
        """Whether ``module`` was listed (for any interpreter)."""
        return module in self.modules


@dataclass(frozen=True, slots=True)
class LaunchContext:
    """What a backend may know about the runtime it launches on."""

    runtime: str
    engine_python: str
    host: str = "127.0.0.1"
    probe: InstallProbe = field(default_factory=SystemProbe)
    """Which servers are installed (the system's: PATH and importable modules)."""
    environ: Mapping[str, str] = field(default_factory=dict)
    """Where image overrides are read (the controller passes its environment)."""
    vendor: str | None = None
    """The GPU vendor detectGPU placed the Model on (for ``auto``); None: not detected."""
    arch: str | None = None
    """The detected GPU architecture (``sm_89``, ``gfx1100``); None: unknown."""
    lora_roots: tuple[str, ...] = ()
    """Directories engines may load LoRA adapters from (the runtime's ``AdapterRoots``)."""
    registry: str | None = None
    """The registry's gRPC address (engines pull weights from live peers through it)."""
    registry_token: str | None = field(default=None, repr=False)
    """The registry's P2P token, handed to the engines that use the registry (never the
    admin token); None: the registry needs none."""


@dataclass(frozen=True, slots=True)
class HttpReadiness:
    """Ready when GET ``url + path`` answers 200, then after each ``then`` POST answers 200."""

    url: str
    """The engine's base URL (http://127.0.0.1:PORT)."""
    path: str
    timeout_s: float
    """How long the engine may take to answer 200 (the backend's startup timeout)."""
    then: tuple[tuple[str, str], ...] = ()
    """(path, JSON body) POSTs once it answers: Ollama's pull and copy of the model."""
    then_timeout_s: float = 3600.0
    """Bound on each of ``then`` (a pull downloads the whole model)."""


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """A runtime-neutral description of one engine process."""

    argv: tuple[str, ...]
    """Command line, without the readiness flag (the runtime appends it for fd engines)."""
    served_name: str
    ready_fd_flag: str = "--ready-fd"
    """Flag through which the engine is told which fd to write its ready line to."""
    env: Mapping[str, str] = field(default_factory=dict)
    gpu_vendor: str | None = None
    """Where detectGPU placed the Model, for runtimes that render it again at start."""
    gpu_arch: str | None = None
    gpus: GPUAssignment | None = None
    """The GPUs this replica is pinned to (local mode: the runtime makes only them visible
    to the engine); None: not pinned."""
    trace_parent: str | None = None
    """The W3C traceparent of the scale-up this replica serves: the local runtime hands it
    to the engine as ``TRACEPARENT``, so the engine's weight loading joins the trace of
    the request that asked for it. Kubernetes writes it to the Model's ``<model>-trace``
    ConfigMap, which the pod template reads it from (``runtime/kubernetes/trace.py``): the
    template is shared by every pod and must not change per start."""
    template_hash: str = ""
    """The digest of the rendering this replica is made from (``core.rollout``), set by the
    planner when it renders the launch: the local runtime carries replicas of an unchanged
    one over to a new generation (``Runtime.renew``). Empty: never carried over."""
    health_path: str = "/readyz"
    """HTTP path answering 200 while the engine serves (used to verify adopted engines)."""
    http_ready: HttpReadiness | None = None
    """Set: readiness is polled over HTTP, no ready fd is used."""
    for_port: Callable[[int], LaunchSpec] | None = None
    """Set: the engine binds a port the runtime picks; this gives the launch for that port
    (every replica gets its own). ``argv`` then shows the launch on the backend's port."""
