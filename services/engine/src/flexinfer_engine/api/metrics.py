"""Engine metrics on the app's own Prometheus registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from flexinfer_engine.core.runner import Hooks


def engine_hooks(registry: CollectorRegistry) -> Hooks:
    """Runner hooks that count generated tokens and time the first token."""
    tokens = Counter("flexinfer_engine_generated_tokens", "Tokens generated", registry=registry)
    ttft = Histogram(
        "flexinfer_engine_time_to_first_token_seconds",
        "Seconds from request admission to its first generated token (queueing included)",
        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        registry=registry,
    )
    return Hooks(on_tokens=tokens.inc, on_first_token=ttft.observe)
