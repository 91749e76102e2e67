"""spec.quantize: convert the cached weights once, in a Job, before the engine starts.

The operator's QuantizationSpec was not available (docs/api-compat.md), so the fields read
here are the ones its docs name: ``format`` (GGUF, AWQ, GPTQ, EXL2, FP8), ``useGPU`` (the
Job gets a GPU and the GPU toleration), and ``image``. Other keys go to the quantizer as
``QUANTIZE_<KEY>`` variables. The quantizer reads ``QUANTIZE_INPUT`` and writes
``QUANTIZE_OUTPUT``, a sibling directory the engine is then pointed at, named by a digest
of the conversion's settings.

FP8 and GGUF default to the built-in quantizer (``flexinfer_controller.quantize``, in the
controller's image). AWQ, GPTQ and EXL2 need calibration on a GPU, which it does not do:
they need ``spec.quantize.image`` (or the controller's ``FLEXINFER_QUANTIZER_<FMT>_IMAGE``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

from flexinfer_common.api import Model
from flexinfer_common.errors import InvalidSpecError
from flexinfer_controller.quantize.request import BUILT_IN, FORMATS, refusal, spec_environment
from flexinfer_controller.runtime.kubernetes.cache import CachePlan, check_quantize_has_cache


@dataclass(frozen=True)
class Quantize:
    """One quantization: format, where from and to (inside the cache), its settings."""

    format: str
    use_gpu: bool
    image: str | None
    """``spec.quantize.image``, else the controller's image variable for the format; None:
    the built-in quantizer in the controller's image."""
    input: str
    output: str
    settings: dict[str, str]


def image_variable(fmt: str) -> str:
    """The controller's variable naming a default quantizer image for ``fmt``."""
    return f"FLEXINFER_QUANTIZER_{fmt}_IMAGE"


def parse(
    model: Model, cache: CachePlan, environ: Mapping[str, str] | None = None
) -> Quantize | None:
    """spec.quantize checked; None when there is none."""
    raw = model.spec.quantize
    if not raw:
        return None
    check_quantize_has_cache(model, cache)
    fmt = str(raw.get("format", "")).upper()
    if fmt not in FORMATS:
        raise InvalidSpecError(
            f"spec.quantize.format must be one of {', '.join(FORMATS)}",
            field="spec.quantize.format",
        )
    use_gpu = raw.get("useGPU", False)
    if not isinstance(use_gpu, bool):
        raise InvalidSpecError(
            "spec.quantize.useGPU must be a boolean", field="spec.quantize.useGPU"
        )
    image = raw.get("image")
    if image is not None and (not isinstance(image, str) or not image.strip()):
        raise InvalidSpecError(
            "spec.quantize.image must be a non-empty string", field="spec.quantize.image"
        )
    image = image or (environ or {}).get(image_variable(fmt)) or None
    if image is None and fmt not in BUILT_IN:
        raise InvalidSpecError(refusal(fmt), field="spec.quantize.image")
    settings = spec_environment(raw)
    source = cache.subpath
    return Quantize(
        fmt, use_gpu, image, source, output_path(source, fmt, image, settings), settings
    )


def output_path(source: str, fmt: str, image: str | None, settings: Mapping[str, str]) -> str:
    """Where one conversion of ``source`` goes: beside it, named by what it converts with.

    The cache volume is shared by every Model of the same source, so two Models asking for
    the same conversion share its output, and two asking for different ones (another
    QUANTIZE_TYPE, another image) must not overwrite each other's.
    """
    identity = json.dumps([fmt, image, sorted(settings.items())], separators=(",", ":"))
    digest = hashlib.sha256(identity.encode()).hexdigest()[:8]
    return f"{source}-{fmt.lower()}-{digest}"
