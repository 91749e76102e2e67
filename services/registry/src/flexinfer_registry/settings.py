"""Registry settings (``FLEXINFER_REGISTRY_*``, plus the ModelExpress server's own env names).

Where the ModelExpress server has an environment variable for a setting (``MX_*``,
``MODEL_EXPRESS_*``, ``REDIS_URL``, ``POD_NAMESPACE``), it is accepted as an alias, so a
ModelExpress deployment's environment configures this registry unchanged.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import AliasChoices, BeforeValidator, Field, SecretStr, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from flexinfer_common.errors import ConfigError
from flexinfer_common.settings import LogSettings, TelemetrySettings, path_list
from flexinfer_registry.config_file import parse_human_size, read_config_file
from flexinfer_registry.core.identity import MAX_MODEL_NAME, IdentityLimits

PREFIX = "FLEXINFER_REGISTRY_"
CHUNK_OVERHEAD_BYTES = 64 * 1024
"""Room for a FileChunk's other fields (path up to 4 KiB, offsets, commit hash) and framing."""


def _env(name: str, *aliases: str) -> AliasChoices:
    """Accept the field's name, ``FLEXINFER_REGISTRY_<NAME>``, then the ModelExpress aliases."""
    return AliasChoices(name, PREFIX + name.upper(), *aliases)


def _byte_size(value: object) -> object:
    """Sizes from the environment or flags may be human ("50GiB"); ints are left to ``ge``."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    try:
        return parse_human_size(value)
    except ConfigError as exc:
        raise ValueError(str(exc)) from exc


ByteSize = Annotated[int | None, BeforeValidator(_byte_size)]
"""Bytes, or text like "50GiB" / "10GB"; None = no limit."""


def _absolute_roots(roots: list[Path]) -> list[Path]:
    for root in roots:
        if not root.is_absolute():
            raise ValueError(f"file root {str(root)!r} must be an absolute path")
    return roots


PathList = Annotated[list[Path], NoDecode, BeforeValidator(path_list)]
"""Absolute directories: a list, a JSON list, or ``/a:/b``."""


def host_list(value: object) -> object:
    """Hosts from the environment: a JSON list, or ``a:5000,b`` (commas, as ports use ``:``)."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        return json.loads(text)
    return [part.strip() for part in text.split(",") if part.strip()]


HostList = Annotated[list[str], NoDecode, BeforeValidator(host_list)]
"""``host[:port]`` entries: a list, a JSON list, or ``a:5000,b``."""

_LIMITS = IdentityLimits()


class LimitSettings(BaseSettings):
    """Bounds on what one request may carry (``FLEXINFER_REGISTRY_LIMITS_*``); requests
    beyond them are refused with INVALID_ARGUMENT naming the field, before anything is
    stored."""

    model_config = SettingsConfigDict(env_prefix=PREFIX + "LIMITS_", extra="ignore")

    model_name_chars: int = Field(default=_LIMITS.model_name_chars, ge=1, le=MAX_MODEL_NAME)
    """Longest model name, in characters: 1024 fits the longest HF ids (96-character repo
    names), bucket URLs with deep prefixes and local checkpoint paths many times over; a
    hostile megabyte name does not reach a store. At most 4096 (PATH_MAX)."""

    field_chars: int = Field(default=_LIMITS.field_chars, ge=16, le=65_536)
    """Longest other string of an identity or worker (versions, dtypes, revisions,
    endpoints, agent and tensor names, map keys and values), in characters: 256 holds a
    git ref, a ``[v6-address]:port`` or a dotted tensor path with room to spare."""

    map_entries: int = Field(default=_LIMITS.map_entries, ge=0, le=100_000)
    """Most entries in ``extra_parameters`` or ``topology``: modelexpress sends a handful
    (a Triton key; one entry per topology level, seven levels in Grove's set)."""

    tensors_per_worker: int = Field(default=_LIMITS.tensors_per_worker, ge=1)
    """Most tensor descriptors in one worker's metadata: 200,000 is twice an unfused
    DeepSeek-V3 checkpoint's ~94,000 weights and scales on one rank, and ~16 MB of
    descriptors, well inside one 100 MB gRPC message."""

    workers_per_source: int = Field(default=_LIMITS.workers_per_source, ge=1)
    """Most workers one source (one mx_source_id) may have: a worker per rank, and 1024
    is four times the widest deployments today (expert parallelism over 32 nodes of 8
    GPUs). A republish of a known worker always fits."""

    def to_core(self) -> IdentityLimits:
        """The core's view of these limits."""
        return IdentityLimits(**self.model_dump())


def _default_cache_dir() -> Path:
    """~/.cache/flexinfer/registry: per user, where caches belong (XDG), kept across runs."""
    return Path.home() / ".cache" / "flexinfer" / "registry"


class RegistrySettings(BaseSettings):
    """The model registry (``FLEXINFER_REGISTRY_*``): REST admin plus ModelExpress gRPC."""

    model_config = SettingsConfigDict(env_prefix=PREFIX, extra="ignore", populate_by_name=True)

    host: str = "127.0.0.1"
    """HTTP listen address: loopback by default so a dev machine does not expose it;
    containers set ``0.0.0.0``."""

    port: int = Field(default=8011, ge=0, le=65535)
    """HTTP (health, metrics, admin REST) port: 8011, beside the gRPC port
    (0 picks a free port)."""

    grpc_host: str = Field(default="127.0.0.1", validation_alias=_env("grpc_host"))
    """gRPC listen address; loopback by default for the same reason as ``host``."""

    grpc_port: int = Field(
        default=8001,
        ge=0,
        le=65535,
        validation_alias=_env("grpc_port", "MODEL_EXPRESS_SERVER_PORT"),
    )
    """gRPC port: 8001, the ModelExpress server's default, so ModelExpress clients need no
    flag (0 picks a free port; the bound address is ``app.state.grpc_address``)."""

    grpc_grace_s: float = Field(default=5.0, ge=0, le=300)
    """Seconds in-flight gRPC calls get to finish at shutdown: file streams are long, but a
    pod's termination grace period (30 s) must still cover the whole shutdown."""

    grpc_max_message_bytes: int = Field(default=100 * 1024 * 1024, ge=4 * 1024 * 1024)
    """Largest gRPC message in either direction: 100 MB, the ModelExpress server's limit
    (WorkerMetadata with many tensor descriptors is large)."""

    cache_dir: Path = Field(
        default_factory=_default_cache_dir,
        validation_alias=_env("cache_dir", "MODEL_EXPRESS_CACHE_DIRECTORY"),
    )
    """Where downloaded models live (one folder per model); in-progress downloads sit in
    its ``.tmp`` folder and are renamed into place only when complete."""

    store: str = Field(default="memory", validation_alias=_env("store", "MX_METADATA_BACKEND"))
    """Record store: ``memory`` (one process, embedded mode), ``redis``, ``sql`` or
    ``kubernetes`` (``k8s``/``crd``): every replica of a cluster must share one."""

    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0", validation_alias=_env("redis_url", "REDIS_URL")
    )
    """Redis for ``store=redis`` (keys ``mx:model:*`` and ``mx:source:*``, as ModelExpress;
    see ``redis_prefix``)."""

    redis_prefix: str = Field(default="mx:", min_length=1, max_length=200)
    """Key prefix of every Redis key (``{prefix}model:*``, ``{prefix}source:*``): ``mx:`` is
    ModelExpress's layout; parallel stacks sharing one Redis each set their own."""

    sql_url: str = Field(default="sqlite:///flexinfer-registry.db")
    """SQLAlchemy URL for ``store=sql`` (SQLite or PostgreSQL)."""

    kubernetes_namespace: str = Field(
        default="default", validation_alias=_env("kubernetes_namespace", "POD_NAMESPACE")
    )
    """Namespace of the ModelCacheEntry/ModelMetadata resources for ``store=kubernetes``."""

    auth_token: SecretStr | None = None
    """When set, gRPC calls need ``authorization: Bearer <token>`` metadata and admin REST
    calls the same header; health probes stay open. Unset = no auth (loopback default)."""

    p2p_token: SecretStr | None = None
    """A second, narrower bearer token: it opens only the gRPC P2pService (PublishMetadata,
    ListSources, GetMetadata, UpdateStatus), what engines need to warm-start from a peer
    and publish themselves; any other method answers PERMISSION_DENIED, and the admin REST
    API 401. Engines get this one, never ``auth_token``. 16-4096 printable ASCII characters;
    only meaningful beside ``auth_token`` (without it every call is open)."""

    p2p_token_file: Path | None = None
    """File of P2P tokens, one per line (a mounted Secret); several lines let the token be
    rotated without downtime, ``#`` starts a comment. Read once at start."""

    fetch_token: SecretStr | None = None
    """A third, narrow bearer token: it opens only the gRPC ModelService calls a download
    Job makes (EnsureModelDownloaded, ListModelFiles, StreamModelFiles); any other method
    (DeleteModel, ApiService, the P2pService) answers PERMISSION_DENIED, and the admin REST
    API 401. The controller's download Jobs get this one, never ``auth_token``. 16-4096
    printable ASCII characters; only meaningful beside ``auth_token``, and unlike it and
    ``p2p_token``."""

    fetch_token_file: Path | None = None
    """File of fetch tokens, one per line (a mounted Secret); several lines let the token be
    rotated without downtime, ``#`` starts a comment. Read once at start."""

    default_chunk_size: int = Field(default=1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    """StreamModelFiles chunk size when the request says 0: 1 MiB (ModelExpress's default)."""

    max_chunk_size: int = Field(default=16 * 1024 * 1024, ge=1024)
    """Largest chunk a client may ask for: 16 MiB bounds per-call memory against hostile
    sizes; larger chunks bought no throughput in bench/registry.py."""

    download_heartbeat_s: float = Field(default=5.0, gt=0)
    """How often a downloader refreshes its DOWNLOADING claim, so other replicas know it lives."""

    download_stale_s: float = Field(default=60.0, gt=0)
    """A DOWNLOADING claim not refreshed for this long has lost its downloader (crash) and is
    reclaimed: many heartbeats long, so a slow store round trip never steals a live claim."""

    download_poll_s: float = Field(default=0.1, gt=0)
    """How often a replica that lost the claim polls the store for the winner's progress."""

    heartbeat_interval_s: float = Field(
        default=30.0,
        gt=0,
        validation_alias=_env("heartbeat_interval_s", "MX_HEARTBEAT_INTERVAL_SECS"),
    )
    """How often P2P workers heartbeat (the client's setting; informational on the server)."""

    heartbeat_timeout_s: float = Field(
        default=90.0,
        gt=0,
        validation_alias=_env("heartbeat_timeout_s", "MX_HEARTBEAT_TIMEOUT_SECS"),
    )
    """A READY source silent this long is hidden from ListSources and marked STALE: three
    missed 30 s heartbeats."""

    reaper_interval_s: float = Field(
        default=30.0,
        gt=0,
        validation_alias=_env("reaper_interval_s", "MX_REAPER_SCAN_INTERVAL_SECS"),
    )
    """How often the reaper marks silent sources STALE and garbage-collects old ones."""

    gc_timeout_s: float = Field(
        default=3600.0, gt=0, validation_alias=_env("gc_timeout_s", "MX_GC_TIMEOUT_SECS")
    )
    """STALE sources silent this long are deleted: an hour keeps them visible for debugging."""

    eviction_enabled: bool = Field(
        default=True,
        validation_alias=_env("eviction_enabled", "MODEL_EXPRESS_CACHE_EVICTION_ENABLED"),
    )
    """Run the LRU eviction task (ModelExpress's ``cache.eviction.enabled``)."""

    eviction_interval_s: float = Field(default=3600.0, gt=0)
    """How often eviction runs: hourly (``check_interval: 1h``)."""

    eviction_unused_threshold_s: float = Field(default=7 * 24 * 3600.0, gt=0)
    """Evict DOWNLOADED models unused this long: 7 days (``unused_threshold: 7d``)."""

    eviction_max_models: int | None = Field(default=None, ge=0)
    """Keep at most this many DOWNLOADED models, evicting least recently used (None = no cap)."""

    cache_max_size_bytes: ByteSize = Field(default=None, ge=0)
    """Cap, in bytes, on the files of cached models (ModelExpress's ``cache.max_size_bytes``;
    "50GiB" works too): each eviction pass evicts least recently used, unused DOWNLOADED
    models until the cache fits. Passes run every ``eviction_interval_s``, on
    ``POST /v1/registry/evict`` and, while eviction is enabled, after each new download
    (never evicting that model). Models in use may keep the cache over it. None = no cap:
    the right size depends on the disk and the models, so only the operator can pick one."""

    eviction_min_free_space_bytes: ByteSize = Field(default=None, ge=0)
    """Bytes to keep free on the cache directory's filesystem
    (``cache.eviction.policy.min_free_space_bytes``; "10GiB" works too): eviction passes
    evict LRU models until this much is free, and while eviction is enabled a new download
    that finds less evicts first and fails with ERROR if it still cannot make room. None =
    no floor: the disk may hold data the registry cannot see, so no default fits every node."""

    file_roots: PathList = Field(default_factory=list)
    """Directories ``file://`` model sources may be read from
    (``FLEXINFER_REGISTRY_FILE_ROOTS``, ``/a:/b`` or a JSON list; absolute paths). Empty,
    the default: every ``file://`` name is refused with PERMISSION_DENIED, as a registry
    that reads any local directory serves whatever its process can read. A name's path,
    decoded and with symlinks resolved, must lie under one; so must every file read for it.
    ``flexinfer up`` passes its own models directory."""

    oci_insecure_registries: HostList = Field(default_factory=list)
    """OCI registries (``host[:port]``; a bare host means any port) that ``oci://`` models
    are fetched from over plain http, as docker's ``insecure-registries``
    (``FLEXINFER_REGISTRY_OCI_INSECURE_REGISTRIES``, comma-separated or a JSON list).
    Empty, the default: every registry, and every token realm, is reached over https."""

    oci_auth_file: Path | None = None
    """A docker ``config.json`` (``{"auths": {"ghcr.io": {"auth": base64(user:pass)}}}``,
    e.g. a mounted ``.dockerconfigjson`` secret) holding Basic credentials for OCI
    registries by host; read at each download, so a rotated secret applies at once. Unset:
    anonymous pulls (and anonymous tokens) only."""

    limits: LimitSettings = Field(default_factory=LimitSettings)
    """Bounds on names, identity fields, tensors and workers per request
    (``FLEXINFER_REGISTRY_LIMITS_*``)."""

    config_file: Path | None = None
    """A ModelExpress server YAML config file (``--config``). As in ModelExpress, flags and
    environment variables override it, and it overrides the defaults."""

    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    """Metrics and traces (``FLEXINFER_TELEMETRY_*``)."""

    log: LogSettings = Field(default_factory=LogSettings)
    """Logging (``FLEXINFER_LOG_*``)."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Flags, then the environment, then the config file, then defaults."""
        config = _ConfigFileSource(settings_cls, init_settings)
        return init_settings, env_settings, dotenv_settings, file_secret_settings, config

    @model_validator(mode="after")
    def _roots_are_absolute(self) -> RegistrySettings:
        """A relative root would depend on the working directory the registry starts in."""
        _absolute_roots(self.file_roots)
        return self

    @model_validator(mode="after")
    def _chunks_fit_messages(self) -> RegistrySettings:
        """A FileChunk (chunk plus a few hundred bytes of fields) must fit one gRPC message."""
        if self.default_chunk_size > self.max_chunk_size:
            raise ValueError("default_chunk_size must not exceed max_chunk_size")
        if self.max_chunk_size + CHUNK_OVERHEAD_BYTES > self.grpc_max_message_bytes:
            raise ValueError(
                "max_chunk_size plus 64 KiB of message fields must fit grpc_max_message_bytes"
            )
        return self


class _ConfigFileSource(PydanticBaseSettingsSource):
    """Field values from the file named by ``config_file`` (a flag or the environment)."""

    def __init__(self, settings_cls: type[BaseSettings], init: PydanticBaseSettingsSource):
        super().__init__(settings_cls)
        self._init = init

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        """Unused: ``__call__`` returns every value at once."""
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        path = None
        if isinstance(self._init, InitSettingsSource):
            path = self._init.init_kwargs.get("config_file")
        path = path or os.environ.get(PREFIX + "CONFIG_FILE")
        return read_config_file(Path(path)) if path else {}
