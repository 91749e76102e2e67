"""FP8 checkpoints (compressed-tensors, as the controller's quantizer writes them), widened
back to the model's dtype on load: the reference engine has no FP8 kernels, so an FP8
Model still runs, with the FP8 rounding in its weights."""

from __future__ import annotations

import torch

from flexinfer_common.errors import PermanentError

SCALE_SUFFIX = "_scale"


def dequantize(tensors: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """``tensors`` with each float8_e4m3fn weight times its ``<name>_scale``, in ``dtype``."""
    out = dict(tensors)
    for name, tensor in tensors.items():
        if tensor.dtype != torch.float8_e4m3fn:
            continue
        scale = out.pop(name + SCALE_SUFFIX, None)
        if scale is None:
            raise PermanentError(f"FP8 weight {name} has no {name}{SCALE_SUFFIX}")
        widened = tensor.to(device=scale.device, dtype=torch.float32) * scale.float()
        out[name] = widened.to(dtype)
    return out
