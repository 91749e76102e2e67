"""A small decoder-only transformer (GPT-2 style, pre-norm) with a real KV cache."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812 (the usual alias)
from torch import nn

from flexinfer_engine.core.config import ModelConfig
from flexinfer_engine.core.lora import LoRABatch, lora_linear


@dataclass
class LayerCache:
    """Keys and values of one layer, preallocated to the context length."""

    keys: torch.Tensor  # (batch, heads, max_len, head_dim)
    values: torch.Tensor


class KVCache:
    """Per-request attention cache: ``length`` positions of every layer are filled."""

    def __init__(
        self, config: ModelConfig, batch: int, device: torch.device, dtype: torch.dtype
    ) -> None:
        shape = (batch, config.num_attention_heads, config.max_position_embeddings, config.head_dim)
        self.layers = [
            LayerCache(
                torch.empty(shape, device=device, dtype=dtype),
                torch.empty(shape, device=device, dtype=dtype),
            )
            for _ in range(config.num_hidden_layers)
        ]
        self.batch = batch
        self.length = 0

    @property
    def positions(self) -> int:
        """Filled positions over every row: what the KV-cache usage gauge counts."""
        return self.batch * self.length


class Attention(nn.Module):
    """Multi-head causal self-attention that appends to and reads from the cache."""

    def __init__(self, config: ModelConfig, path: str) -> None:
        super().__init__()
        self.heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out = nn.Linear(config.hidden_size, config.hidden_size)
        # Module paths, as named_modules() and LoRA adapters name these linears.
        self._names = (f"{path}.qkv", f"{path}.out")

    def forward(
        self, x: torch.Tensor, cache: LayerCache | None, past: int, lora: LoRABatch | None
    ) -> torch.Tensor:
        """Attend from the new positions to every earlier and new position."""
        batch, steps, width = x.shape
        q, k, v = lora_linear(self.qkv, self._names[0], x, lora).chunk(3, dim=-1)
        q, k, v = (
            t.view(batch, steps, self.heads, self.head_dim).transpose(1, 2) for t in (q, k, v)
        )
        if cache is not None:
            cache.keys[:, :, past : past + steps] = k
            cache.values[:, :, past : past + steps] = v
            k = cache.keys[:, :, : past + steps]
            v = cache.values[:, :, : past + steps]
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=_mask(steps, past, x.device), is_causal=past == 0 and steps > 1
        )
        return lora_linear(
            self.out, self._names[1], y.transpose(1, 2).reshape(batch, steps, width), lora
        )


def _mask(steps: int, past: int, device: torch.device) -> torch.Tensor | None:
    # No mask for a fresh prefill (is_causal does it) or one new token (it sees everything).
    if past == 0 or steps == 1:
        return None
    rows = torch.arange(steps, device=device).unsqueeze(1) + past
    cols = torch.arange(past + steps, device=device).unsqueeze(0)
    return cols <= rows


def mlp(
    x: torch.Tensor,
    norm: tuple[torch.Tensor, torch.Tensor],
    fc_in: tuple[torch.Tensor, torch.Tensor],
    fc_out: tuple[torch.Tensor, torch.Tensor],
    eps: float,
) -> torch.Tensor:
    """x + fc_out(gelu(fc_in(ln(x)))) over rows of ``x``: what compile mode compiles. The
    weights are arguments, not captured, so one graph serves every layer."""
    hidden = F.layer_norm(x, (x.shape[-1],), norm[0], norm[1], eps)
    return x + F.linear(F.gelu(F.linear(hidden, *fc_in)), *fc_out)


MLP = Callable[..., torch.Tensor]
"""``mlp`` or its compiled form."""


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, config: ModelConfig, path: str) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.attn = Attention(config, f"{path}.attn")
        self.ln_2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.fc_in = nn.Linear(config.hidden_size, config.intermediate_size)
        self.fc_out = nn.Linear(config.intermediate_size, config.hidden_size)
        self._names = (f"{path}.fc_in", f"{path}.fc_out")
        self.compiled_mlp: MLP | None = None
        """Set by compile mode; LoRA rows keep the eager path (adapters vary per request)."""

    def forward(
        self, x: torch.Tensor, cache: LayerCache | None, past: int, lora: LoRABatch | None
    ) -> torch.Tensor:
        """One block over the new positions."""
        x = x + self.attn(self.ln_1(x), cache, past, lora)
        if self.compiled_mlp is not None and lora is None:
            # Rows flattened: the batch joins the dynamic dimension, so prefill and decode
            # are the only two graphs whatever the request's n.
            rows = x.reshape(-1, x.shape[-1])
            params = (self.ln_2.weight, self.ln_2.bias), self.fc_in_params, self.fc_out_params
            return self.compiled_mlp(rows, *params, self.ln_2.eps).view_as(x)
        hidden = F.gelu(lora_linear(self.fc_in, self._names[0], self.ln_2(x), lora))
        return x + lora_linear(self.fc_out, self._names[1], hidden, lora)

    @property
    def fc_in_params(self) -> tuple[torch.Tensor, torch.Tensor]:
        """fc_in's (weight, bias)."""
        return self.fc_in.weight, self.fc_in.bias

    @property
    def fc_out_params(self) -> tuple[torch.Tensor, torch.Tensor]:
        """fc_out's (weight, bias)."""
        return self.fc_out.weight, self.fc_out.bias


class DecoderLM(nn.Module):
    """Token + learned position embeddings, blocks, final norm, lm_head with a bias."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embed_positions = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.layers = nn.ModuleList(
            Block(config, f"layers.{index}") for index in range(config.num_hidden_layers)
        )
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=True)

    def use_mlp(self, compiled: MLP | None) -> None:
        """Run every block's MLP through ``compiled`` (None: eager again)."""
        for block in self.layers:
            assert isinstance(block, Block)
            block.compiled_mlp = compiled

    def forward(
        self, tokens: torch.Tensor, cache: KVCache | None = None, lora: LoRABatch | None = None
    ) -> torch.Tensor:
        """Logits (batch, steps, vocab) for ``tokens`` following what ``cache`` holds, with
        each row's LoRA adapter (``lora``) applied on top of the base weights."""
        past = 0 if cache is None else cache.length
        steps = tokens.shape[1]
        if past + steps > self.config.max_position_embeddings:
            raise ValueError("sequence longer than max_position_embeddings")
        positions = torch.arange(past, past + steps, device=tokens.device)
        x = self.embed_tokens(tokens) + self.embed_positions(positions)
        for index, layer in enumerate(self.layers):
            x = layer(x, None if cache is None else cache.layers[index], past, lora)
        if cache is not None:
            cache.length = past + steps
        return lora_linear(self.lm_head, "lm_head", self.norm(x), lora)
