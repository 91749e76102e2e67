"""Sampling parameters and the sampler: temperature (0 = greedy), top-p, per-request seed."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import torch

from flexinfer_engine.core.tokenizer import BOS, PAD


@dataclass(frozen=True)
class SamplingParams:
    """Validated parameters of one generation request."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    n: int = 1
    stop: tuple[str, ...] = ()
    seed: int | None = None
    ignore_eos: bool = False


def make_generator(seed: int | None, device: torch.device) -> torch.Generator:
    """A private generator: the same seed gives the same samples, whatever else runs."""
    generator = torch.Generator(device=device)
    generator.manual_seed(secrets.randbits(63) if seed is None else seed)
    return generator


def sample(
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator,
    *,
    allow_eos: bool = True,
    eos: int = 257,
) -> torch.Tensor:
    """Next token per row of ``logits`` (batch, vocab)."""
    logits = logits.float()
    # BOS and PAD are never generated; EOS only when allowed.
    logits[:, BOS] = float("-inf")
    logits[:, PAD] = float("-inf")
    if not allow_eos:
        logits[:, eos] = float("-inf")
    if params.temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / params.temperature, dim=-1)
    if params.top_p < 1.0:
        probs = _top_p(probs, params.top_p)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def _top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    ordered, order = probs.sort(dim=-1, descending=True)
    before = ordered.cumsum(dim=-1) - ordered
    # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
    ordered = ordered.masked_fill(before >= top_p, 0.0)
    kept = torch.zeros_like(probs).scatter(-1, order, ordered)
    return kept / kept.sum(dim=-1, keepdim=True)
