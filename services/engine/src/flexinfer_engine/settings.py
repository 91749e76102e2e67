"""Engine settings (``FLEXINFER_ENGINE_*``); CLI flags override them."""

from __future__ import annotations

import tempfile
from pathlib import Path

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from flexinfer_common.auth import bearer_token
from flexinfer_common.settings import LogSettings, RootList, TelemetrySettings
from flexinfer_transfer.settings import TransferSettings


class EngineSettings(BaseSettings):
    """Everything one engine process needs to serve one model."""

    model_config = SettingsConfigDict(
        env_prefix="FLEXINFER_ENGINE_", extra="ignore", populate_by_name=True
    )

    model_dir: Path | None = None
    """Directory holding config.json and the safetensors weights (required to serve)."""

    served_model_name: str | None = None
    """Name clients put in ``model``; defaults to the model directory's name."""

    host: str = "127.0.0.1"
    """Interface to listen on: loopback by default, the proxy sits in front."""

    port: int = Field(default=0, ge=0, le=65535)
    """TCP port; 0 picks a free one (reported on the ready fd)."""

    device: str = "cpu"
    """Torch device for the weights: ``cpu`` or ``cuda[:N]``."""

    registry: str = ""
    """The registry's gRPC ``host:port``. Set: the weights are pulled over NIXL from a
    READY replica of the same model and config when one is listed there (files
    otherwise), and with ``p2p_source`` this replica publishes itself there. Empty: files
    only (the strategies are ``FLEXINFER_TRANSFER_STRATEGIES``)."""

    registry_token: SecretStr | None = None
    """The registry's P2P token (its ``FLEXINFER_REGISTRY_P2P_TOKEN``), sent as
    ``authorization: Bearer`` on ListSources, GetMetadata, PublishMetadata and
    UpdateStatus. Needed when the registry was started with tokens; never its admin token,
    which this engine has no use for. Unset: calls carry no token."""

    registry_token_file: Path | None = None
    """A file holding that token (a mounted Secret); its first token is used, read at
    start. ``registry_token`` wins when both are set."""

    transfer: TransferSettings = Field(default_factory=TransferSettings)
    """The load strategy chain, source selection and file reader (``FLEXINFER_TRANSFER_*``)."""

    p2p_source: bool = False
    """Serve the loaded weights to peer replicas over NIXL while awake (libs/transfer's
    PeerSource, configured by ``FLEXINFER_TRANSFER_SOURCE_*``): off by default, as it
    needs the nixl extra and opens two ports."""

    worker_id: str = ""
    """This replica's id as a source; empty: ``<hostname>-<pid>``."""

    max_concurrent_generations: int = Field(default=1, ge=1, le=64)
    """Generations running at once. 1 by default: a small model saturates the cores with
    one, and a FIFO queue keeps latency fair instead of slicing every request thinner."""

    max_waiting_requests: int = Field(default=256, ge=0)
    """Requests allowed to queue for a slot before new ones get 503 with Retry-After."""

    max_body_bytes: int = Field(default=1 << 20, ge=1024)
    """Largest accepted request body in bytes (1 MiB: far beyond any prompt that fits
    the context, small enough that a hostile client cannot exhaust memory)."""

    default_max_tokens: int = Field(default=256, ge=1)
    """Completion tokens when a chat request gives no max_tokens (capped by the context)."""

    max_loras: int = Field(default=1, ge=1, le=1024)
    """LoRA adapters loaded at once (vLLM's --max-loras, same default); loading one more
    is refused until one is unloaded."""

    max_lora_rank: int = Field(default=16, ge=1, le=4096)
    """Highest adapter rank accepted (vLLM's --max-lora-rank, same default)."""

    lora_roots: RootList = Field(default_factory=list)
    """Directories adapters may be loaded from (``/a:/b`` or a JSON list). None by default:
    POST /v1/load_lora_adapter is then refused, as no path is trusted."""

    compile: bool = False
    """Run every block's MLP through ``torch.compile`` (inductor) before the engine reports
    ready. Off by default: a cold compile costs tens of seconds of CPU (a C++ compiler run
    per kernel) for a model this small; a fetched cache (``artifact_transfer``) makes it a
    few seconds."""

    compile_cache_dir: Path | None = None
    """Inductor's cache directory (TORCHINDUCTOR_CACHE_DIR, Triton's under it). None:
    ``<tmp>/flexinfer-engine/<worker_id>/torchinductor``, one per replica, so that two
    replicas on one host do not share a cache and every hit comes from this replica's own
    compile or from a verified artifact."""

    artifact_transfer: bool = Field(
        default=False,
        validation_alias=AliasChoices("MX_ARTIFACT_TRANSFER", "FLEXINFER_ENGINE_ARTIFACT_TRANSFER"),
    )
    """MX_ARTIFACT_TRANSFER (ModelExpress's name and default, off): with ``compile`` and a
    registry, fetch the compile cache from a READY replica of the same identity before
    compiling, and once ready serve this replica's own cache to the next ones. Caches hold
    generated code: enable it only among trusted replicas and a trusted registry."""

    artifact_bundle_root: Path | None = Field(
        default=None,
        validation_alias=AliasChoices(
            "MX_ARTIFACT_BUNDLE_ROOT", "FLEXINFER_ENGINE_ARTIFACT_BUNDLE_ROOT"
        ),
    )
    """MX_ARTIFACT_BUNDLE_ROOT: where the sealed copy of the cache that peers read is kept
    while it is served. None: ModelExpress's default, ``$TMPDIR/modelexpress-artifacts``."""

    def bundle_root(self) -> Path:
        """``artifact_bundle_root`` or its default."""
        default = Path(tempfile.gettempdir()) / "modelexpress-artifacts"
        return self.artifact_bundle_root or default

    torch_threads: int | None = Field(default=None, ge=1)
    """Intra-op CPU threads for torch; unset keeps torch's default (one per core)."""

    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    """Metrics and traces."""

    log: LogSettings = Field(default_factory=LogSettings)
    """Logging."""

    def registry_bearer(self) -> str | None:
        """The registry P2P token to send (the setting, else the file's); None: none."""
        return bearer_token(self.registry_token, self.registry_token_file, kind="registry P2P")
