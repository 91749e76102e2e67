"""The quantizer's errors: each says what was refused and why."""

from __future__ import annotations

from flexinfer_common.errors import PermanentError

EXIT_REFUSED = 2
"""The exit code of a usage error or a refused request: running it again refuses again."""


class QuantizeError(PermanentError):
    """A quantization that would fail again the same way (bad input, unsupported model)."""


class UnsupportedError(QuantizeError):
    """The format, architecture or tensor is one the built-in quantizer does not convert."""
