"""Run one quantization: the format's converter into a staged directory, published whole."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from flexinfer_controller.quantize import fp8_convert, gguf_convert, output
from flexinfer_controller.quantize.errors import QuantizeError, UnsupportedError
from flexinfer_controller.quantize.request import QuantizeRequest, refusal

log = logging.getLogger(__name__)

Converter = Callable[[QuantizeRequest, Path], None]

CONVERTERS: dict[str, Converter] = {
    "FP8": fp8_convert.convert,
    "GGUF": gguf_convert.convert,
}
"""A converter per format of ``request.BUILT_IN``."""


def run(request: QuantizeRequest) -> bool:
    """Quantize ``request``; False when its output was complete already (nothing done)."""
    converter = CONVERTERS.get(request.format)
    if converter is None:
        raise UnsupportedError(refusal(request.format))
    if not request.input.is_dir():
        raise QuantizeError(f"the input {request.input} is not a directory")
    if output.is_complete(request):
        log.info("%s is already a %s conversion of %s", request.output, request.format,
                 request.input)  # fmt: skip
        return False
    output.remove_leftovers(request.output)
    started = time.monotonic()
    try:
        with output.staged(request) as staging:
            converter(request, staging)
    except OSError as exc:
        raise QuantizeError(f"writing {request.output} failed: {exc}") from exc
    log.info("wrote %s (%s) in %.1fs", request.output, request.format, time.monotonic() - started)
    return True
