"""Backend config files as a ConfigMap, for backends that read their model layout from one.

ComfyUI finds models only through ``extra_model_paths.yaml``; unless config.modelsPath names
the user's own file, the controller writes one pointing at the cache and passes it with
``--extra-model-paths-config``. Backends are looked up in a name -> renderer table; the
others need no file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from flexinfer_controller.runtime.kubernetes.context import RenderContext
from flexinfer_controller.runtime.kubernetes.names import Obj, labels, metadata, object_name

CONFIG_VOLUME = "backend-config"
CONFIG_MOUNT = "/etc/flexinfer/backend"
COMFYUI_FOLDERS = (
    "checkpoints", "clip", "clip_vision", "controlnet", "diffusion_models", "embeddings", "loras",
    "text_encoders", "unet", "upscale_models", "vae",
)  # fmt: skip


@dataclass(frozen=True)
class BackendConfig:
    """Files for the backend, and the args that point it at them."""

    files: dict[str, str]
    args: tuple[str, ...]


def comfyui(ctx: RenderContext) -> BackendConfig | None:
    """``extra_model_paths.yaml`` with base_path at the weights' location."""
    config = ctx.model.spec.config or {}
    location = ctx.engine.model_mount
    if config.get("modelsPath") or location is None:
        return None
    lines = ["flexinfer:", f"  base_path: {location}"]
    lines += [f"  {folder}: {folder}/" for folder in COMFYUI_FOLDERS]
    name = "extra_model_paths.yaml"
    return BackendConfig(
        {name: "\n".join(lines) + "\n"}, ("--extra-model-paths-config", f"{CONFIG_MOUNT}/{name}")
    )


CONFIG_RENDERERS: dict[str, Callable[[RenderContext], BackendConfig | None]] = {
    "comfyui": comfyui,
}


def backend_config(ctx: RenderContext) -> BackendConfig | None:
    """The backend's config files, when it needs any."""
    render = CONFIG_RENDERERS.get(ctx.backend_name)
    return render(ctx) if render else None


def config_map_name(ctx: RenderContext) -> str:
    """``<model>-config``."""
    return object_name(ctx.model.metadata.name, "config")


def config_map(ctx: RenderContext) -> Obj | None:
    """The ConfigMap holding the backend's files; None when it needs none."""
    config = backend_config(ctx)
    if config is None:
        return None
    obj_labels = labels(ctx.model, ctx.backend_name, "engine")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(ctx.model, config_map_name(ctx), obj_labels, {}),
        "data": dict(config.files),
    }


def apply_to_pod(ctx: RenderContext, pod: Obj) -> None:
    """Mount the ConfigMap in the engine container and add the args that name its files."""
    config = backend_config(ctx)
    if config is None:
        return
    engine = pod["containers"][0]
    engine["args"] = [*engine.get("args", []), *config.args]
    engine["volumeMounts"].append(
        {"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT, "readOnly": True}
    )
    pod["volumes"].append({"name": CONFIG_VOLUME, "configMap": {"name": config_map_name(ctx)}})
