"""Byte-level tokenizer: 256 byte tokens plus BOS/EOS/PAD, a chat template, streaming decode."""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from dataclasses import dataclass

BOS = 256
EOS = 257
PAD = 258
VOCAB_SIZE = 259
SPECIAL_TOKENS = {BOS: "<|bos|>", EOS: "<|eos|>", PAD: "<|pad|>"}

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}\n{% endfor %}<|assistant|>\n"
)
"""The chat template in Jinja form (written to tokenizer_config.json); ``format_chat`` is it."""


@dataclass(frozen=True)
class ChatMessage:
    """One chat turn with plain-text content."""

    role: str
    content: str


class ByteTokenizer:
    """Every UTF-8 byte is one token; special tokens sit above 255."""

    bos_token_id = BOS
    eos_token_id = EOS
    pad_token_id = PAD
    vocab_size = VOCAB_SIZE

    def encode(self, text: str, *, add_bos: bool = True) -> list[int]:
        """Token ids of ``text`` (BOS first unless told otherwise)."""
        ids = list(text.encode("utf-8"))
        return [BOS, *ids] if add_bos else ids

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``; special tokens are dropped, invalid UTF-8 becomes U+FFFD."""
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")

    def format_chat(self, messages: Sequence[ChatMessage]) -> str:
        """The prompt text for a conversation, ending where the assistant speaks."""
        turns = "".join(f"<|{m.role}|>\n{m.content}\n" for m in messages)
        return turns + "<|assistant|>\n"


class IncrementalDecoder:
    """Turns a stream of token ids into text without ever splitting a UTF-8 character.

    Incomplete multi-byte sequences are held back until they complete; invalid bytes become
    U+FFFD, so every emitted piece is valid text.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token: int) -> str:
        """Text completed by ``token`` (often empty while a character is incomplete)."""
        if not 0 <= token < 256:
            return ""
        return self._decoder.decode(bytes((token,)))

    def flush(self) -> str:
        """Whatever is still held back (an incomplete character becomes U+FFFD)."""
        return self._decoder.decode(b"", final=True)
