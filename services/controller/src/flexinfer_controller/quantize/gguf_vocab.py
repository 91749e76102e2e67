"""The tokenizer inside a GGUF file: llama.cpp tokenizes with it, so it must be complete.

Two kinds are written: the reference models' byte tokenizer (256 bytes and the special
tokens after them) as a byte-level BPE whose one merge never applies, which splits text
into exactly its bytes; and an HF ``tokenizer.json`` byte-level BPE (GPT-2, Llama 3,
Mistral's newer ones). A SentencePiece ``tokenizer.model`` would need the sentencepiece
package: it is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf

from flexinfer_controller.quantize.errors import UnsupportedError
from flexinfer_controller.quantize.safetensors_io import read_json

_SPECIALS = ("bos", "eos", "pad")


def byte_level_alphabet() -> list[str]:
    """GPT-2's printable stand-in for each byte 0..255 (how byte-level BPE spells bytes)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    spelled = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in spelled:
            spelled[b] = chr(256 + extra)
            extra += 1
    return [spelled[b] for b in range(256)]


def add_byte_vocab(writer: gguf.GGUFWriter, directory: Path, config: dict[str, Any]) -> None:
    """The reference model's byte tokenizer: ids 0..255 are bytes, then BOS, EOS, PAD."""
    tokenizer = read_json(directory / "tokenizer_config.json")
    ids = {kind: config.get(f"{kind}_token_id") for kind in _SPECIALS}
    special: dict[str, int] = {k: v for k, v in ids.items() if isinstance(v, int)}
    if sorted(special.values()) != [256, 257, 258] or config.get("vocab_size") != 259:
        raise UnsupportedError("the byte tokenizer must have BOS, EOS, PAD at 256-258 of 259")
    by_id = {i: str(tokenizer.get(f"{k}_token") or f"<|{k}|>") for k, i in special.items()}
    tokens = [*byte_level_alphabet(), *(by_id[i] for i in range(256, 259))]
    types = [gguf.TokenType.NORMAL] * 256 + [gguf.TokenType.CONTROL] * 3
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    # llama.cpp insists on a merges array and gguf writes no empty one: one merge of two
    # special tokens, which are split off before BPE and so never meet inside a word.
    writer.add_token_merges([f"{by_id[256]} {by_id[257]}"])
    writer.add_bos_token_id(special["bos"])
    writer.add_eos_token_id(special["eos"])
    writer.add_pad_token_id(special["pad"])
    writer.add_add_bos_token(False)
    template = tokenizer.get("chat_template")
    if isinstance(template, str):
        writer.add_chat_template(template)


def add_bpe_vocab(writer: gguf.GGUFWriter, directory: Path, vocab_size: int) -> None:
    """An HF byte-level BPE tokenizer (tokenizer.json), padded to the model's vocab size."""
    if not (directory / "tokenizer.json").is_file():
        found = (
            "tokenizer.model (SentencePiece)"
            if (directory / "tokenizer.model").exists()
            else "none"
        )
        raise UnsupportedError(
            f"GGUF needs a byte-level BPE tokenizer.json; the checkpoint has {found}"
        )
    try:
        vocab = gguf.vocab.BpeVocab(directory)
    except (FileNotFoundError, ValueError, KeyError) as exc:
        raise UnsupportedError(f"tokenizer.json is not a byte-level BPE tokenizer: {exc}") from exc
    tokens: list[bytes] = []
    types: list[int] = []
    for text, _score, kind in vocab.all_tokens():
        tokens.append(text if isinstance(text, bytes) else str(text).encode())
        types.append(int(kind))
    if len(tokens) > vocab_size:
        raise UnsupportedError(f"the tokenizer has {len(tokens)} tokens, the model {vocab_size}")
    for i in range(len(tokens), vocab_size):
        tokens.append(f"[PAD{i}]".encode())
        types.append(int(gguf.TokenType.UNUSED))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    gguf.vocab.SpecialVocab(directory, load_merges=True, n_vocab=vocab_size).add_to_gguf(
        writer, quiet=True
    )
