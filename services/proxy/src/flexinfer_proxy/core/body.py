"""Request bodies: find the ``model`` field, and rewrite it only when it must change."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from flexinfer_common.errors import InvalidSpecError


class BadRequestError(InvalidSpecError):
    """The request body is not a JSON object with a string ``model``."""


@dataclass(frozen=True, slots=True)
class ParsedBody:
    """A JSON request body and the model name it asks for."""

    raw: bytes
    data: dict[str, Any]
    model: str

    def with_model(self, name: str) -> bytes:
        """The body to forward: the original bytes unless ``model`` must be rewritten."""
        if name == self.model:
            return self.raw
        return json.dumps({**self.data, "model": name}, ensure_ascii=False).encode()


def parse_body(raw: bytes) -> ParsedBody:
    """Parse a JSON body; BadRequestError when it is malformed or has no string model."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadRequestError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequestError("request body must be a JSON object")
    model = data.get("model")
    if model is None:
        raise BadRequestError("you must provide a model parameter", field="model")
    if not isinstance(model, str) or not model:
        raise BadRequestError("model must be a non-empty string", field="model")
    return ParsedBody(raw=raw, data=data, model=model)
