"""Everything the object renderers share for one Model, worked out once.

``build_context`` validates the backend, renders its EngineSpec for where the weights are
in the container, and settles the cache, flash loader, quantization and GPU choices.
"""

from __future__ import annotations

from dataclasses import dataclass

from flexinfer_common.api import Model
from flexinfer_common.errors import InvalidSpecError
from flexinfer_controller.backends.base import (
    Backend,
    BackendRegistry,
    EngineSpec,
    RenderRequest,
    UnsupportedBackendError,
)
from flexinfer_controller.flashload.plan import safe_name
from flexinfer_controller.flashload.render import TMPFS_MOUNT
from flexinfer_controller.flashload.settings import FlashLoadSettings
from flexinfer_controller.quantize.request import GGUF_FILE
from flexinfer_controller.runtime.kubernetes import cache as cache_mod
from flexinfer_controller.runtime.kubernetes import quantize, scheduling
from flexinfer_controller.runtime.kubernetes.cache import CachePlan
from flexinfer_controller.runtime.kubernetes.options import RenderOptions


@dataclass(frozen=True)
class RenderContext:
    """One Model's render inputs and decisions."""

    model: Model
    backend: Backend
    options: RenderOptions
    vendor: str
    gpus: int
    cache: CachePlan
    weights: str
    """The weights' directory inside the cache volume ("" for its root)."""
    flash: FlashLoadSettings | None
    """The flash loader's settings; None when it is off."""
    quantize: quantize.Quantize | None
    engine: EngineSpec

    @property
    def backend_name(self) -> str:
        """The canonical backend name (labels, names)."""
        return self.backend.name


def flash_settings(
    model: Model, cache: CachePlan, options: RenderOptions
) -> FlashLoadSettings | None:
    """spec.cache.flashLoader over the controller's defaults; automatic for Local and Memory."""
    if not cache.has_volume:
        return None
    spec = model.spec.cache.flash_loader if model.spec.cache else None
    enabled = spec.enabled if spec and spec.enabled is not None else None
    if enabled is None:
        enabled = options.flash.enabled or cache.strategy in ("Local", "Memory")
    if not enabled:
        return None
    if spec is None:
        return options.flash
    update: dict[str, object] = {
        "concurrency": spec.concurrency,
        "buffer_size_kb": spec.buffer_size_kb,
    }
    if spec.verify_integrity is not None:
        update["verify_integrity"] = spec.verify_integrity
    return options.flash.model_copy(update=update)


def model_location(
    model: Model, ctx_cache: CachePlan, weights: str, flash: bool, mount: str
) -> str | None:
    """Where the engine reads the weights: the tmpfs copy, the cache volume, or nowhere."""
    if flash:
        return f"{TMPFS_MOUNT}/{safe_name(model.key)}"
    if not ctx_cache.has_volume:
        return None
    return "/".join(part for part in (mount.rstrip("/"), weights) if part)


def _backend(model: Model, backends: BackendRegistry) -> Backend:
    backend = backends.get(model.spec.backend)
    if backend is None:
        known = ", ".join(backends.names())
        raise UnsupportedBackendError(f"backend {model.spec.backend!r} is not one of: {known}")
    return backend


def build_context(model: Model, backends: BackendRegistry, options: RenderOptions) -> RenderContext:
    """Validate and decide; InvalidSpecError / UnsupportedBackendError for what cannot run."""
    if model.spec.is_external:
        raise InvalidSpecError("a Model with spec.endpoints runs nothing on the cluster")
    backend = _backend(model, backends)
    vendor = scheduling.vendor(model, options.gpu)
    cache = cache_mod.plan(model, backend.needs_volume)
    quant = quantize.parse(model, cache, options.environ)
    weights = quant.output if quant else cache.subpath
    flash = flash_settings(model, cache, options)
    location = model_location(model, cache, weights, flash is not None, options.model_mount)
    if location is not None and quant is not None and quant.format == "GGUF":
        location = f"{location}/{GGUF_FILE}"  # the one file the quantizer wrote there
    request = RenderRequest(
        model=model, model_location=location, vendor=vendor, arch=options.gpu.arch,
        environ=options.environ, lora_roots=options.lora_roots,
        registry=options.registry_address or None,
        registry_token_secret=options.registry_token_secret,
    )  # fmt: skip
    return RenderContext(
        model=model, backend=backend, options=options, vendor=vendor,
        gpus=scheduling.gpu_count(model, vendor), cache=cache, weights=weights, flash=flash,
        quantize=quant, engine=backend.render(request),
    )  # fmt: skip
