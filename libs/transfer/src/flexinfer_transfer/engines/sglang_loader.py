"""FlexInfer's loader in SGLang: a model-loader class given as ``load_format``.

SGLang's ``get_model_loader`` instantiates ``load_config.load_format`` when it is a class,
so ``sglang.Engine(model_path=..., load_format=FlexInferSglangLoader)`` loads through
FlexInfer's strategy chain: SGLang's model is built on its device, filled from a peer's
memory or the checkpoint files, and finished by the quant methods'
``process_weights_after_loading`` as SGLang's DefaultModelLoader does. Importing this
module without SGLang raises an ImportError that says what to install.
"""

from __future__ import annotations

from flexinfer_transfer.engines.requirements import require_engine

require_engine("sglang", "pip install 'sglang[srt]'")

from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
from sglang.srt.distributed import (  # noqa: E402
    get_tensor_model_parallel_rank,
    get_tensor_model_parallel_world_size,
)
from sglang.srt.model_loader import loader as sglang_loader  # noqa: E402
from sglang.srt.model_loader.utils import set_default_torch_dtype  # noqa: E402
from sglang.srt.model_loader.weight_utils import download_weights_from_hf  # noqa: E402
from torch import nn  # noqa: E402

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


class FlexInferSglangLoader(sglang_loader.BaseModelLoader):  # type: ignore[misc]
    """SGLang's BaseModelLoader, loading through FlexInfer's LoadStrategyChain."""

    def download_model(self, model_config: Any) -> None:
        """Fetch the checkpoint from the hub unless it is a local directory."""
        self._model_dir(model_config)

    def load_model(self, *, model_config: Any, device_config: Any) -> nn.Module:
        """Build the model on SGLang's device and fill it through the strategy chain."""
        target = torch.device(device_config.device)
        settings = EngineLoadingSettings()
        load_config = self.load_config

        def build() -> nn.Module:
            with set_default_torch_dtype(model_config.dtype), target:
                return _initialize(model_config, load_config)

        loading = Loading(
            identity=identity_of(model_config, settings),
            worker_id=default_worker_id(settings.worker_id),
            device="cpu",  # staged on the host; the model's weight loaders copy and shard
            accelerator=target.type,
            worker_rank=int(get_tensor_model_parallel_rank()),
        )
        # As in SGLang's DefaultModelLoader, weights load under the model's default dtype.
        with set_default_torch_dtype(model_config.dtype):
            model = load_through_chain(
                self._model_dir(model_config),
                loading,
                build,
                process_quantized_weights,
                settings,
                skeleton_post_process=_finish_skeleton,
            ).model
        return model.eval()

    def _model_dir(self, model_config: Any) -> Path:
        def download(name: str) -> str:
            folder: str = download_weights_from_hf(
                name, self.load_config.download_dir, WEIGHT_PATTERNS, model_config.revision
            )
            return folder

        return model_directory(model_config.model_path, download)


def _initialize(model_config: Any, load_config: Any) -> nn.Module:
    # Newer SGLang resolves the quantization config before building; older builds it inside.
    quant = getattr(sglang_loader, "_get_quantization_config", None)
    if quant is None:
        model: nn.Module = sglang_loader._initialize_model(model_config, load_config)
        return model
    built: nn.Module = sglang_loader._initialize_model(
        model_config, load_config, quant(model_config, load_config)
    )
    return built


def process_quantized_weights(model: nn.Module) -> None:
    """What SGLang runs after ``model.load_weights``: each quant method's post-processing."""
    for module in model.modules():
        quant_method = getattr(module, "quant_method", None)
        if quant_method is not None:
            quant_method.process_weights_after_loading(module)


def _finish_skeleton(model: nn.Module) -> None:
    # A peer-filled model never runs load_weights, which ends with the model's own
    # post_load_weights fixup in SGLang; run it here, then the quant processing.
    post_load = getattr(model, "post_load_weights", None)
    if callable(post_load):
        post_load()
    process_quantized_weights(model)


def identity_of(model_config: Any, settings: EngineLoadingSettings) -> SourceIdentity:
    """This SGLang worker's SourceIdentity."""
    return SourceIdentity(
        model_name=settings.model_name or str(model_config.model_path),
        backend_framework=p2p_pb2.BACKEND_FRAMEWORK_SGLANG,
        tensor_parallel_size=int(get_tensor_model_parallel_world_size()),
        dtype=str(model_config.dtype).removeprefix("torch."),
        quantization=str(model_config.quantization or ""),
        revision=settings.revision or str(model_config.revision or ""),
    )
