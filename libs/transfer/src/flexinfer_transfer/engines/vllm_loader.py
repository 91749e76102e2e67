"""FlexInfer's loader in vLLM: ``--load-format flexinfer``.

vLLM builds the model on its device; the strategy chain then fills it from the fastest
live source (a peer's memory over NIXL, then the checkpoint files), and vLLM's own
``process_weights_after_loading`` finishes it. ``register()`` adds the load format; the
``vllm.general_plugins`` entry point (``vllm_plugin``) calls it in every vLLM process.
Importing this module without vLLM raises an ImportError that says what to install.
"""

from __future__ import annotations

from flexinfer_transfer.engines.requirements import require_engine

require_engine("vllm", "pip install vllm")

import contextlib  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402
from vllm.distributed import (  # noqa: E402
    get_tensor_model_parallel_rank,
    get_tensor_model_parallel_world_size,
)
from vllm.model_executor.model_loader import register_model_loader  # noqa: E402
from vllm.model_executor.model_loader.base_loader import BaseModelLoader  # noqa: E402
from vllm.model_executor.model_loader.utils import (  # noqa: E402
    initialize_model,
    process_weights_after_loading,
)
from vllm.model_executor.model_loader.weight_utils import download_weights_from_hf  # noqa: E402

from flexinfer_common.mx_identity import SourceIdentity  # noqa: E402
from flexinfer_transfer._generated import p2p_pb2  # noqa: E402
from flexinfer_transfer.engine_loading import (  # noqa: E402
    EngineLoadingSettings,
    Loading,
    default_worker_id,
)
from flexinfer_transfer.engines.embedded import (  # noqa: E402
    WEIGHT_PATTERNS,
    load_through_chain,
    model_directory,
)

LOAD_FORMAT = "flexinfer"


class FlexInferModelLoader(BaseModelLoader):  # type: ignore[misc]
    """vLLM's BaseModelLoader, loading through FlexInfer's LoadStrategyChain."""

    def download_model(self, model_config: Any) -> None:
        """Fetch the checkpoint from the hub unless it is a local directory."""
        self._model_dir(model_config)

    def load_weights(self, model: nn.Module, model_config: Any) -> None:
        """Reload weights into an already built model (vLLM's in-place API): its own
        ``load_weights`` adopts the chain's file tensors; vLLM post-processes after, so
        no peer (whose tensors come post-processed) is asked."""
        settings = EngineLoadingSettings(registry="", serve_peers=False)
        loading = self._loading(model_config, _device_of(model), settings)
        load_through_chain(
            self._model_dir(model_config), loading, lambda: model, lambda _m: None, settings
        )

    def load_model(self, vllm_config: Any, model_config: Any, prefix: str = "") -> nn.Module:
        """Build the model on vLLM's device and fill it through the strategy chain."""
        # LoadConfig.device (a load-time device override) is absent from older vLLMs.
        load_device = getattr(vllm_config.load_config, "device", None)
        device = load_device or vllm_config.device_config.device
        target = torch.device(device)
        settings = EngineLoadingSettings()

        # Newer vLLMs build through the loader's create_model (it also logs online
        # quantization); older ones through initialize_model, which create_model wraps.
        create = getattr(self, "create_model", None) or initialize_model

        def build() -> nn.Module:
            with _default_dtype(model_config.dtype), target:
                model: nn.Module = create(
                    vllm_config=vllm_config, model_config=model_config, prefix=prefix
                )
            return model

        def post_process(model: nn.Module) -> None:
            process_weights_after_loading(model, model_config, target)

        loading = self._loading(model_config, target, settings)
        # As in vLLM's own load_model, weight loading and post-processing run under the
        # model's default dtype too.
        with _default_dtype(model_config.dtype):
            model = load_through_chain(
                self._model_dir(model_config), loading, build, post_process, settings
            ).model
        return model.eval()

    def _model_dir(self, model_config: Any) -> Path:
        def download(name: str) -> str:
            folder: str = download_weights_from_hf(
                name, self.load_config.download_dir, WEIGHT_PATTERNS, model_config.revision
            )
            return folder

        return model_directory(model_config.model, download)

    def _loading(
        self, model_config: Any, device: torch.device, settings: EngineLoadingSettings
    ) -> Loading:
        return Loading(
            identity=identity_of(model_config, settings),
            worker_id=default_worker_id(settings.worker_id),
            device="cpu",  # staged on the host; the model's weight loaders copy and shard
            accelerator=device.type,
            worker_rank=int(get_tensor_model_parallel_rank()),
        )


def identity_of(model_config: Any, settings: EngineLoadingSettings) -> SourceIdentity:
    """This vLLM worker's SourceIdentity (the fields ModelExpress's vLLM loader fills)."""
    served = model_config.served_model_name
    name = served[0] if isinstance(served, list) else served
    return SourceIdentity(
        model_name=settings.model_name or str(name or model_config.model),
        backend_framework=p2p_pb2.BACKEND_FRAMEWORK_VLLM,
        tensor_parallel_size=int(get_tensor_model_parallel_world_size()),
        dtype=str(model_config.dtype).removeprefix("torch."),
        quantization=str(model_config.quantization or ""),
        revision=settings.revision or str(model_config.revision or ""),
    )


def _device_of(model: nn.Module) -> torch.device:
    first = next(model.parameters(), None)
    return first.device if first is not None else torch.device("cpu")


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    # Parameters vLLM's layers create without a dtype take the model's.
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def register() -> None:
    """Add ``--load-format flexinfer`` to vLLM's model loaders."""
    register_model_loader(LOAD_FORMAT)(FlexInferModelLoader)
