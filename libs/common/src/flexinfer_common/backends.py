"""Each backend's static facts, kept once: name, aliases, port and inference routes.

The proxy forwards exactly these routes to a model's engine, and the controller's backend
plugins declare them: both read this table, so the two cannot drift apart. Routes come from
each server's documentation with admin routes left out (vLLM's ``/sleep`` and
``/v1/load_lora_adapter``, Ollama's ``/api/pull``, llama.cpp's ``/slots``): one client
reaching those acts for every client. Names, aliases and ports follow the FlexInfer
operator's backend registry (reference §5).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BackendFacts:
    """What every component may know about a backend without running it."""

    name: str
    aliases: tuple[str, ...]
    port: int
    """The port the backend's server listens on in its container."""
    routes: frozenset[str]
    """Inference routes (POST) the proxy forwards to it."""


_LLM = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings"})
_AUDIO_IN = frozenset({"/v1/audio/transcriptions", "/v1/audio/translations"})
_IMAGES = frozenset({"/v1/images/generations", "/v1/images/edits"})

OPENAI_ROUTES = (
    _LLM
    | _AUDIO_IN
    | _IMAGES
    | {"/v1/responses", "/v1/audio/speech", "/v1/moderations", "/v1/images/variations"}
)
"""OpenAI's own inference routes: what an OpenAI-compatible external server may serve."""

EXTERNAL = "external"
"""The route-table key of models served by spec.endpoints (no backend runs for them)."""

_VLLM_EXTRA = {
    "/v1/responses",
    "/v1/rerank",
    "/v2/rerank",
    "/rerank",
    "/v1/score",
    "/score",
    "/pooling",
    "/classify",
    "/tokenize",
    "/detokenize",
}
_LLAMACPP_EXTRA = {
    "/v1/rerank",
    "/completion",
    "/embedding",
    "/infill",
    "/tokenize",
    "/detokenize",
    "/rerank",
}

BACKENDS: tuple[BackendFacts, ...] = (
    BackendFacts(
        "reference",
        ("flexinfer", "flexinfer-engine"),
        8000,
        frozenset({"/v1/chat/completions", "/v1/completions"}),
    ),
    BackendFacts("vllm", (), 8000, _LLM | _AUDIO_IN | _VLLM_EXTRA),
    BackendFacts(
        "ollama", (), 11434, _LLM | {"/api/generate", "/api/chat", "/api/embed", "/api/embeddings"}
    ),
    BackendFacts("llamacpp", ("llama.cpp", "llama-cpp", "llama_cpp"), 8080, _LLM | _LLAMACPP_EXTRA),
    BackendFacts("mlc-llm", ("mlc", "mlc_llm"), 8000, _LLM),
    BackendFacts("diffusers", (), 8000, _IMAGES),
    BackendFacts("comfyui", ("comfy", "comfy-ui", "comfy_ui"), 8188, frozenset({"/prompt"})),
    BackendFacts(
        "vllm-omni",
        ("vllm-diffusion", "vllm_omni"),
        8000,
        _IMAGES | {"/v1/chat/completions", "/v1/audio/speech"},
    ),
)
"""Every backend FlexInfer knows (immutable: a table, not state)."""


def backend_facts(name: str) -> BackendFacts:
    """The facts of the backend called ``name`` (canonical, exact); KeyError if unknown."""
    for facts in BACKENDS:
        if facts.name == name:
            return facts
    raise KeyError(name)


def route_table() -> dict[str, frozenset[str]]:
    """Inference routes by canonical backend name, plus ``external`` (spec.endpoints)."""
    table = {facts.name: facts.routes for facts in BACKENDS}
    table[EXTERNAL] = OPENAI_ROUTES
    return table


def alias_table() -> dict[str, str]:
    """Alias (lower case) -> canonical backend name."""
    return {alias.lower(): facts.name for facts in BACKENDS for alias in facts.aliases}
