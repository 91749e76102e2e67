"""What to quantize: a format, the input and output directories, the format's options.

The Job passes them as ``QUANTIZE_FORMAT``, ``QUANTIZE_INPUT``, ``QUANTIZE_OUTPUT`` and one
``QUANTIZE_<KEY>`` variable per other ``spec.quantize`` key (``type`` -> ``QUANTIZE_TYPE``);
the command line's flags say the same and win over the variables.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flexinfer_common.errors import InvalidSpecError
from flexinfer_controller.quantize.errors import QuantizeError

FORMATS = ("GGUF", "AWQ", "GPTQ", "EXL2", "FP8")
BUILT_IN = ("FP8", "GGUF")
"""The formats the built-in quantizer converts; the others need calibration on a GPU."""
GGUF_FILE = "model.gguf"
"""The file a GGUF conversion writes in its output directory: what the engine is given."""
PREFIX = "QUANTIZE_"
_FIXED = frozenset({"FORMAT", "INPUT", "OUTPUT"})
SPEC_FIELDS = frozenset({"format", "useGPU", "image"})
"""spec.quantize keys the controller reads itself; every other one is a format option."""
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")


@dataclass(frozen=True)
class QuantizeRequest:
    """One quantization: ``input`` (a checkpoint directory) to ``output`` in ``format``."""

    format: str
    input: Path
    output: Path
    options: Mapping[str, str] = field(default_factory=dict)
    """Lower-case option names (``type``, ``strategy``...) to their values."""

    def digest(self) -> str:
        """What the output was made from: a changed format, input or option redoes it."""
        data = [self.format, str(self.input), sorted(self.options.items())]
        return hashlib.sha256(json.dumps(data).encode()).hexdigest()


def refusal(fmt: str) -> str:
    """Why ``fmt`` is not converted here, naming the field that brings a quantizer that is."""
    return (
        f"{fmt} needs calibration with GPU libraries that the built-in quantizer does not "
        f"have (it converts {' and '.join(BUILT_IN)}): set spec.quantize.image to an image "
        f"that quantizes to {fmt}"
    )


def _checked(text: str, what: str) -> str:
    if not text or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise QuantizeError(f"{what} must be non-empty and hold no control characters")
    return text


def _env_name(key: str) -> str:
    return PREFIX + re.sub(r"(?<!^)(?=[A-Z])", "_", key).upper()


def spec_environment(raw: Mapping[str, Any]) -> dict[str, str]:
    """spec.quantize's format options as ``QUANTIZE_<KEY>`` variables (``weightStrategy``
    -> ``QUANTIZE_WEIGHT_STRATEGY``); InvalidSpecError for a key or value that cannot be."""
    out: dict[str, str] = {}
    for key, value in sorted(raw.items()):
        if key in SPEC_FIELDS or value is None:
            continue
        if not _KEY.match(key) or isinstance(value, dict | list):
            raise InvalidSpecError(f"spec.quantize.{key} must be a scalar with a camelCase name")
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if any(c in text for c in "\x00\r\n"):
            raise InvalidSpecError(f"spec.quantize.{key} must not contain NUL or line breaks")
        out[_env_name(key)] = text
    return out


def options_from_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``QUANTIZE_<KEY>`` variables but the fixed three, as ``{"key": value}``."""
    return {
        name[len(PREFIX) :].lower(): value
        for name, value in environ.items()
        if name.startswith(PREFIX) and name[len(PREFIX) :] not in _FIXED
    }


def build_request(
    fmt: str | None, source: str | None, dest: str | None, options: Mapping[str, str]
) -> QuantizeRequest:
    """A checked request; QuantizeError names what is missing or malformed."""
    if not fmt:
        raise QuantizeError(f"no format: set QUANTIZE_FORMAT or --format ({', '.join(FORMATS)})")
    name = fmt.strip().upper()
    if name not in FORMATS:
        raise QuantizeError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
    if not source or not dest:
        raise QuantizeError("both the input and the output directory are required")
    src = Path(_checked(source, "the input directory")).absolute()
    out = Path(_checked(dest, "the output directory")).absolute()
    if out == src or out in src.parents or src in out.parents:
        raise QuantizeError(f"the output {out} must not be the input {src}, inside or above it")
    for key, value in options.items():
        _checked(key, "an option name")
        _checked(value, f"option {key}")
    return QuantizeRequest(name, src, out, {k.lower(): v for k, v in options.items()})
