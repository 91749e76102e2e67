"""What an engine process inherits from the controller's environment: an allow-list.

The controller's environment holds secrets an engine has no use for (its admin token, the
proxy's client tokens in the embedded stack, database and cloud credentials); an engine
that runs a third party's server (vLLM, llama.cpp) must not be handed them. It gets what
makes a process run on this machine and find its accelerators, plus its own settings.
"""

from __future__ import annotations

from collections.abc import Mapping

INHERITED_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "TERM",
        "PYTHONPATH",
        "PYTHONHOME",
        "VIRTUAL_ENV",
        "LD_LIBRARY_PATH",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "HF_HOME",
        "HF_HUB_OFFLINE",
    }
)
"""Variables a process needs as it is: paths, locale, thread counts, an offline hub cache."""

INHERITED_PREFIXES = (
    "LC_",
    "CUDA_",
    "NVIDIA_",
    "HIP_",
    "ROCR_",
    "TORCH_",
    "MALLOC_",
    "UCX_",
    "NIXL_",
    "OTEL_",
    "FLEXINFER_ENGINE_",
    "FLEXINFER_TRANSFER_",
    "FLEXINFER_LOG_",
    "FLEXINFER_TELEMETRY_",
)
"""Families an engine reads: accelerator selection, allocator and transport tuning,
tracing, and the engine's own FLEXINFER_ENGINE_* and weight-transfer settings."""

_SECRET_MARKS = ("TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "API_KEY")
"""Never inherited, whatever the family: a token-like name in an allowed family is still
a token (FLEXINFER_TELEMETRY_OTEL_HEADERS may carry one too, so OTEL headers are out)."""


def engine_environment(environ: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    """The environment an engine starts with: the allowed part of ``environ``, then
    ``extra`` (what its backend and the runtime set, which always wins)."""
    inherited = {
        name: value
        for name, value in environ.items()
        if (name in INHERITED_NAMES or name.startswith(INHERITED_PREFIXES))
        and not any(mark in name.upper() for mark in _SECRET_MARKS)
        and "HEADERS" not in name.upper()
    }
    return {**inherited, **extra}


TRACEPARENT_ENV = "TRACEPARENT"
"""Where a process finds the trace it runs for (the environment-variable carrier of W3C
trace context, as OpenTelemetry's specification names it)."""


def trace_env(traceparent: str | None) -> dict[str, str]:
    """``TRACEPARENT`` for an engine started for a traced scale-up (empty: untraced)."""
    return {TRACEPARENT_ENV: traceparent} if traceparent else {}
