"""Controller settings (``FLEXINFER_CONTROLLER_*``)."""

from __future__ import annotations

import os
import secrets
import socket
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import SettingsConfigDict

from flexinfer_common.auth import AdminAuthSettings
from flexinfer_common.quantity import QUANTITY_PATTERN
from flexinfer_common.settings import (
    BusSettings,
    LogSettings,
    RootList,
    StoreSettings,
    TelemetrySettings,
)
from flexinfer_controller.adapters.registry.settings import RegistryClientSettings
from flexinfer_controller.catalog.settings import CatalogSettings
from flexinfer_controller.flashload.settings import FlashLoadSettings
from flexinfer_controller.kube_settings import KubernetesSettings
from flexinfer_controller.scaleout_settings import ScaleOutSettings
from flexinfer_controller.sharing_settings import GPUSharingSettings
from flexinfer_controller.sleep_settings import SleepSettings


def default_instance_id() -> str:
    """hostname-pid-random: unique per process, used as this replica's bus consumer name."""
    host = socket.gethostname().split(".")[0] or "controller"
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"


class DeclaredGPU(BaseModel):
    """One node's accelerators in local mode, as the agent would label them."""

    model_config = ConfigDict(extra="forbid")

    vendor: Literal["nvidia", "amd", "intel"]
    count: int = Field(default=1, ge=1, le=64)
    arch: str | None = Field(default=None, max_length=32, pattern=r"^[a-z0-9_]+$")
    """``sm_89``, ``gfx1100``: what ``flexinfer.ai/gpu.arch`` says on a node."""
    vram: str | None = Field(default=None, pattern=QUANTITY_PATTERN)
    """Memory of one GPU as a quantity (``24Gi``), as ``flexinfer.ai/gpu.vram``."""
    node: str | None = Field(default=None, max_length=253)
    """The node's name in status.gpu.node (default: this machine's hostname)."""


class ControllerSettings(AdminAuthSettings):
    """The controller service (``FLEXINFER_CONTROLLER_*``).

    The admin token fields (``AUTH_TOKEN``, ``AUTH_TOKEN_FILE``, ``ALLOW_UNAUTHENTICATED``)
    come from ``AdminAuthSettings``.
    """

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_CONTROLLER_", extra="ignore")

    host: str = "127.0.0.1"
    """Admin API listen address: loopback by default. Any other address needs an admin token
    (``AUTH_TOKEN``) or an explicit ``ALLOW_UNAUTHENTICATED``."""

    port: int = Field(default=8090, ge=0, le=65535)
    """Admin API port (0 picks a free one); 8090 keeps clear of the proxy's 8080."""

    namespace: str = Field(default="default", min_length=1, max_length=63)
    """Namespace used when a request names none, like kubectl's default namespace."""

    runtime: str = "local"
    """Where engines run: ``local`` (subprocesses on this machine, Models in the SQL store)
    or ``kubernetes`` (pods of one Deployment per Model, Models as custom resources)."""

    data_dir: Path = Path(".flexinfer/controller")
    """Engine state files (``engines/``) and logs (``logs/``) of the local runtime. Its
    resolved path also identifies the runtime, so two data dirs never adopt each other's
    engines."""

    engine_python: str = sys.executable
    """Python interpreter that runs ``-m flexinfer_engine`` (the controller's own by default,
    which has the engine installed in the same environment)."""

    instance_id: str = Field(default_factory=default_instance_id, min_length=1, max_length=100)
    """This controller replica's consumer name in the shared ``controller`` group."""

    workers: int = Field(default=4, ge=1, le=64)
    """Concurrent reconcile workers; one key is never reconciled twice at once."""

    resync_interval_s: float = Field(default=10.0, gt=0)
    """Seconds between level-triggered reconciles of every Model: a safety net for missed
    events, cheap because a no-op reconcile writes nothing."""

    lora_resync_interval_s: float = Field(default=30.0, gt=0)
    """Seconds between passes over every Model with LoRAAdapters: each asks the engines
    what they hold, so one that restarted in place and lost its adapters gets them back."""

    lora_roots: RootList = Field(default_factory=list)
    """Directories LocalPath LoRAAdapters may be loaded from (``/a:/b`` or a JSON list), as
    the engines see them. None by default: a LocalPath makes an engine read files at a
    path the adapter's author chose, and an engine run locally can read whatever the
    controller's user can, so no path is trusted until the operator names one. Adapters
    elsewhere fail (``PathNotAllowed``) before any engine is asked. The controller's
    adapter cache (local mode) and the base Model's volume (Kubernetes) are roots too;
    the reference engine is given every root (``--lora-root``), vLLM checks none itself."""

    engine_startup_timeout_s: float = Field(default=300.0, gt=0)
    """Seconds an engine may take to report ready before it is killed (vLLM's 300 s)."""

    stop_grace_s: float = Field(default=10.0, ge=0)
    """Seconds between SIGTERM and SIGKILL when stopping an engine: enough to finish
    in-flight requests, short enough that scale-down frees memory promptly."""

    drain_grace_s: float = Field(default=120.0, ge=0)
    """Seconds a ready engine the controller stops (a scale-in, a rollout, scale to zero,
    an unload) keeps serving the requests it holds once withdrawn from the proxies: it
    stops as soon as its metrics show none. Long enough for a long completion stream; 0
    stops at once (``stop_grace_s`` then bounds what the engine finishes). A swap on a
    shared GPU drains for its GPUGroup's own timeout instead."""

    stop_engines_on_shutdown: bool = False
    """Stop engines when the controller exits. False lets a restarted controller adopt
    them without a cold start; the embedded stack sets True so it leaves no orphans."""

    adopt_probe_timeout_s: float = Field(default=2.0, gt=0)
    """Seconds to wait for an adopted engine's /readyz before treating it as unresponsive."""

    exit_poll_interval_s: float = Field(default=1.0, gt=0)
    """Poll period for exits of engines that cannot be watched with a pidfd."""

    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    """Largest admin API request body (1 MiB): a Model document is a few kilobytes."""

    crash_backoff_initial_s: float = Field(default=1.0, ge=0)
    """Delay before restarting an engine after its first crash; doubles per crash."""

    crash_backoff_max_s: float = Field(default=60.0, ge=0)
    """Upper bound of the restart delay after repeated crashes."""

    crash_loop_limit: int = Field(default=5, ge=1)
    """Crashes within ``crash_loop_window_s`` after which the Model goes Failed and stays
    so until its spec changes (a crash loop will not fix itself)."""

    crash_loop_window_s: float = Field(default=600.0, gt=0)
    """Window in seconds over which crashes are counted."""

    bus: BusSettings = Field(default_factory=BusSettings)
    """The event bus (``FLEXINFER_BUS_*``): in memory embedded, Redis distributed."""
    store: StoreSettings = Field(default_factory=StoreSettings)
    """The SQL store (``FLEXINFER_STORE_*``): SQLite embedded, PostgreSQL distributed."""
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    """Metrics and traces (``FLEXINFER_TELEMETRY_*``)."""
    log: LogSettings = Field(default_factory=LogSettings)
    """Logging (``FLEXINFER_LOG_*``)."""
    gpus: list[DeclaredGPU] = Field(default_factory=list, max_length=256)
    """Local mode's GPU inventory for detectGPU (``FLEXINFER_CONTROLLER_GPUS``, a JSON list
    of ``{vendor, count, arch, vram}``). Empty by default: this machine is taken to have
    only its CPU until GPUs are declared, since local mode does not probe hardware."""
    gpu_sharing: GPUSharingSettings = Field(default_factory=GPUSharingSettings)
    """Who holds a ``spec.gpu.shared`` group's GPU (``FLEXINFER_CONTROLLER_GPU_SHARING_*``;
    off by default, see ``GPUSharingSettings.mode``)."""
    scaleout: ScaleOutSettings = Field(default_factory=ScaleOutSettings)
    """Scale-out by the engines' load (``FLEXINFER_CONTROLLER_SCALEOUT_*``)."""
    sleep: SleepSettings = Field(default_factory=SleepSettings)
    """Sleep rather than stop engines at zero replicas (``FLEXINFER_CONTROLLER_SLEEP_*``;
    off by default, see ``SleepSettings.budget_mb``)."""
    flash_loader: FlashLoadSettings = Field(default_factory=FlashLoadSettings)
    """Local mode's pre-start copy to tmpfs (``FLEXINFER_FLASH_LOADER_*``); a Model's
    ``spec.cache.flashLoader`` overrides it per model."""
    registry: RegistryClientSettings = Field(default_factory=RegistryClientSettings)
    """The registry that fetches remote sources (``FLEXINFER_CONTROLLER_REGISTRY_*``)."""
    catalog: CatalogSettings = Field(default_factory=CatalogSettings)
    """How ModelCatalogs are synced (``FLEXINFER_CATALOG_*``)."""
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)
    """The apiserver and watched namespaces of the ``kubernetes`` runtime
    (``FLEXINFER_KUBERNETES_*``)."""
