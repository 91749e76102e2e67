"""The quantizer as local mode's pre-start step (``core.prestart.PreStart``).

A Model with ``spec.quantize`` is converted from its cached weights into
``<data_dir>/quantized/<namespace>_<name>/<format>`` before its first engine starts, and
launched from there (a GGUF conversion: from its one file). The step runs in a worker
thread; the engine is not started, so the Model is not ready, until it is done. A refusal
or a failed conversion is a PreStartRefusedError: the Model goes Failed with its message. Local
mode has no images, so ``image`` and ``useGPU`` mean nothing here.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path

from flexinfer_common.api import Model
from flexinfer_common.errors import InvalidSpecError
from flexinfer_controller.core.prestart import PreStartRefusedError
from flexinfer_controller.flashload.plan import safe_name
from flexinfer_controller.quantize.errors import QuantizeError, UnsupportedError
from flexinfer_controller.quantize.request import (
    BUILT_IN,
    GGUF_FILE,
    QuantizeRequest,
    build_request,
    options_from_environ,
    spec_environment,
)
from flexinfer_controller.quantize.run import run

log = logging.getLogger(__name__)


def local_request(model: Model, model_dir: Path, root: Path) -> QuantizeRequest | None:
    """The quantization ``model`` asks for in local mode; None when it asks for none."""
    raw = model.spec.quantize
    if not raw:
        return None
    fmt = str(raw.get("format", "")).upper()
    if fmt and fmt not in BUILT_IN:
        raise UnsupportedError(
            f"{fmt} needs calibration with GPU libraries, and local mode runs only the "
            f"built-in quantizer ({', '.join(BUILT_IN)}); spec.quantize.image is run by the "
            "kubernetes runtime only"
        )
    options = options_from_environ(spec_environment(raw))
    dest = root / safe_name(model.key) / fmt.lower()
    return build_request(fmt, str(model_dir), str(dest), options)


def launch_path(request: QuantizeRequest) -> Path:
    """What the engine is given: the output directory, or the GGUF file in it."""
    return request.output / GGUF_FILE if request.format == "GGUF" else request.output


class QuantizePreStart:
    """Quantize each Model's weights before its engine starts; drop them with the Model."""

    def __init__(self, root: Path) -> None:
        self._root = root

    async def prepare(self, model: Model, model_dir: Path) -> Path:
        """The converted weights to launch from, or ``model_dir`` without spec.quantize."""
        try:
            request = local_request(model, model_dir, self._root)
            if request is None:
                return model_dir
            # Seconds to minutes of numpy work: a worker thread keeps the loop free.
            if await asyncio.to_thread(run, request):
                log.info("quantized %s to %s for %s", model_dir, request.format, model.key)
        except (QuantizeError, InvalidSpecError) as exc:
            raise PreStartRefusedError(
                f"spec.quantize: {exc}", status_reason="QuantizeFailed"
            ) from exc
        return launch_path(request)

    async def release(self, key: str) -> None:
        """Remove what was converted for the Model ``key``."""
        target = self._root / safe_name(key)
        if target.exists():
            await asyncio.to_thread(shutil.rmtree, target, True)
