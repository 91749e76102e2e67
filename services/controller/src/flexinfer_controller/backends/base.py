"""The Backend interface: static facts plus one render method, and its registry.

A backend knows how its server is started for a Model: image, command, args, env, port,
probes, where the model goes. ``render`` turns a Model into a runtime-neutral EngineSpec;
each runtime then makes of it what it runs (a local subprocess, a Deployment's container).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import ClassVar

from flexinfer_common.api import Model
from flexinfer_common.backends import BackendFacts
from flexinfer_common.errors import PermanentError

VENDORS = frozenset({"nvidia", "amd", "intel", "cpu"})
"""GPU vendors a backend may support (``cpu``: no accelerator)."""


class UnsupportedBackendError(PermanentError):
    """The backend is known but cannot run here: wrong vendor, runtime, or not installed."""


class ModelPassing(StrEnum):
    """How a backend's server is told which model to serve."""

    FLAG = "flag"
    """``--model <location>``."""
    POSITIONAL = "positional"
    """The location as a positional argument."""
    ENV = "env"
    """Environment variables (``MODEL_ID``)."""
    PULL = "pull"
    """No volume: the server pulls the model itself (Ollama)."""
    VOLUME = "volume"
    """Only through the mounted volume and the server's own config (ComfyUI)."""


@dataclass(frozen=True, slots=True)
class Probe:
    """A readiness or startup check, with Kubernetes' timings (seconds)."""

    port: int
    path: str | None
    """HTTP GET path answering 200; None: a TCP connect."""
    initial_delay_s: int
    period_s: int
    timeout_s: int
    failure_threshold: int


@dataclass(frozen=True, slots=True)
class SleepEndpoints:
    """Admin routes that free and restore accelerator memory without a restart."""

    sleep: str
    wake: str


@dataclass(frozen=True, slots=True)
class AdapterEndpoints:
    """A server's runtime LoRA API (vLLM's): POST routes that load and unload an adapter.

    ``load`` takes ``{"lora_name", "lora_path"}`` and ``unload`` ``{"lora_name"}``; both
    answer 200 when done and 4xx (OpenAI's error shape) when the engine refuses. The
    adapters an engine holds are listed by ``listing`` (GET), one card per adapter whose
    ``parent`` is the base model and whose ``root`` is the path it was loaded from.
    """

    load: str
    unload: str
    listing: str = "/v1/models"


@dataclass(frozen=True, slots=True)
class SecretKeyRef:
    """One key of a Kubernetes Secret in the engine's namespace (``valueFrom.secretKeyRef``):
    how a pod gets a token without the token ever being written into its spec."""

    name: str
    key: str


@dataclass(frozen=True, slots=True)
class RenderRequest:
    """What a runtime tells a backend to render an engine for one Model."""

    model: Model
    model_location: str | None
    """Where the weights are as the engine sees them (a path in the container or a local
    dir); None when there is none yet, or the backend pulls the model itself."""
    vendor: str | None = None
    """``nvidia``, ``amd``, ``intel`` or ``cpu``; None when unknown."""
    arch: str | None = None
    """GPU architecture (``sm_89``, ``gfx1100``); None when unknown."""
    host: str = "0.0.0.0"
    """Address to bind: the local runtime binds 127.0.0.1, Kubernetes 0.0.0.0."""
    port: int | None = None
    """Port to bind; None: the backend's own port."""
    environ: Mapping[str, str] = field(default_factory=dict)
    """Where image overrides (``DEFAULT_VLLM_IMAGE``...) are read: injected, never os.environ."""
    lora_adapters: int = 0
    """LoRAAdapters bound to the model (vLLM enables LoRA when there are any)."""
    lora_roots: tuple[str, ...] = ()
    """Directories, as the engine sees them, that LoRA adapters may be loaded from; an
    engine that checks adapter paths itself is given them (the reference engine)."""
    registry: str | None = None
    """The registry's gRPC address as the engine reaches it; an engine that can is told
    it, to pull its weights from a live replica and serve its own to the next (P2P)."""
    registry_token: str | None = field(default=None, repr=False)
    """The registry's P2P token, for runtimes that set engine environments themselves
    (local); never rendered into a pod spec. None: no token (or a Secret, below)."""
    registry_token_secret: SecretKeyRef | None = None
    """Where pods read that token from (Kubernetes); None: engines get no token."""


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """A runtime-neutral engine: everything a Deployment's container or a subprocess needs."""

    backend: str
    image: str
    command: tuple[str, ...]
    """Empty: the image's entrypoint."""
    args: tuple[str, ...]
    env: dict[str, str]
    host: str
    port: int
    served_name: str
    readiness: Probe
    startup: Probe | None
    startup_timeout_s: float
    model_mount: str | None
    """Where the model volume is mounted (the rendered location); None: no volume."""
    field_env: dict[str, str] = field(default_factory=dict)
    """Variables set from the pod's own fields (name -> Kubernetes fieldPath, such as
    ``status.podIP``); the local runtime's engines need none of them."""
    secret_env: dict[str, SecretKeyRef] = field(default_factory=dict)
    """Variables set from a Secret's key (name -> the Secret and key), for tokens: a pod
    spec never holds the value; the local runtime puts literal values in ``env`` instead."""
    pull: str | None = None
    """A model the server must pull before it serves (Ollama's tag); None: nothing to pull."""


class Backend(ABC):
    """One inference server family (reference, vllm, ollama, ...)."""

    facts: ClassVar[BackendFacts]
    """Name, aliases, port and inference routes, from the table the proxy reads too."""
    vendors: ClassVar[frozenset[str]] = frozenset({"nvidia", "amd"})
    model_passing: ClassVar[ModelPassing] = ModelPassing.FLAG
    needs_volume: ClassVar[bool] = True
    sleep: ClassVar[SleepEndpoints | None] = None
    lora: ClassVar[AdapterEndpoints | None] = None
    """Where LoRAAdapters are loaded into a running server; None: no hot-swap."""
    metrics_path: ClassVar[str | None] = None
    default_idle_timeout_s: ClassVar[float] = 300.0
    """The operator's DefaultIdleTimeout: 5m for LLMs, 10m for image backends."""
    startup_timeout_s: ClassVar[float] = 60.0

    @property
    def name(self) -> str:
        """The canonical name."""
        return self.facts.name

    def supports_arch(self, vendor: str, arch: str) -> bool:
        """Whether the server's kernels run on GPU architecture ``arch`` (``sm_89``,
        ``gfx1100``) of ``vendor``; a backend that documents no limit runs on any."""
        return True

    @property
    def aliases(self) -> tuple[str, ...]:
        """Other names ``spec.backend`` may use."""
        return self.facts.aliases

    @property
    def port(self) -> int:
        """The port the server listens on in its container."""
        return self.facts.port

    @property
    def routes(self) -> frozenset[str]:
        """Inference routes the proxy forwards to it."""
        return self.facts.routes

    def lora_disabled(self, model: Model) -> str | None:
        """Why ``model``'s server, as rendered, cannot take adapters now (a flag it must be
        started with); None when it can, or when the backend has no adapter API."""
        return None

    def vram_estimate_mb(self, model_dir: Path) -> int | None:
        """What one replica of the model in ``model_dir`` needs of a GPU, in MiB, when the
        backend can tell from the files (used where the Model sets no ``gpu.vramEstimateMB``);
        None: unknown."""
        return None

    @abstractmethod
    def render(self, request: RenderRequest) -> EngineSpec:
        """The engine for ``request``; InvalidSpecError for a bad config value,
        UnsupportedBackendError for a vendor this backend does not support."""


BackendFactory = Callable[[], Backend]


class BackendRegistry:
    """Backends by name and alias (case-insensitive, like the operator's backend.Get)."""

    def __init__(self, factories: Mapping[str, BackendFactory]) -> None:
        self._backends: dict[str, Backend] = {}
        self._names: list[str] = []
        for name, factory in factories.items():
            backend = factory()
            self._names.append(name)
            for key in (name, *backend.aliases):
                self._backends[key.lower()] = backend

    def get(self, name: str) -> Backend | None:
        """The backend called ``name`` (or one of its aliases), None if unknown."""
        return self._backends.get(name.strip().lower())

    def names(self) -> list[str]:
        """Canonical backend names, for error messages."""
        return sorted(self._names)
