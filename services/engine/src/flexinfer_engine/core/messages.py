"""Chat messages as OpenAI defines them, one model per role, and their prompt text.

Every role OpenAI's chat API accepts is accepted here but ``function``, which OpenAI
deprecated in favour of ``tool``. Content is text: image, audio and file parts are valid
shapes this engine cannot read, so they are refused with the part's path as ``param``
(see ``unreadable_parts``) rather than dropped.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

STRICT = ConfigDict(strict=True, extra="forbid")
"""OpenAI's request schema: exact JSON types, and no member it does not define."""


class TextPart(BaseModel):
    """A text content part."""

    model_config = STRICT
    type: Literal["text"]
    text: str


class RefusalPart(BaseModel):
    """An assistant's refusal content part (replayed history)."""

    model_config = STRICT
    type: Literal["refusal"]
    refusal: str


class MediaPart(BaseModel):
    """An image, audio or file part: accepted as a shape, refused as content."""

    model_config = ConfigDict(strict=True, extra="allow")
    type: Literal["image_url", "input_audio", "file"]


UserPart = Annotated[TextPart | MediaPart, Field(discriminator="type")]
AssistantPart = Annotated[TextPart | RefusalPart, Field(discriminator="type")]


def _join(content: str | list[Any] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.text if isinstance(p, TextPart) else p.refusal for p in content)


class SystemMessage(BaseModel):
    """Instructions (role ``system``)."""

    model_config = STRICT
    role: Literal["system"]
    content: str | list[TextPart]
    name: str | None = None

    def text(self) -> str:
        """The message's text."""
        return _join(self.content)


class DeveloperMessage(SystemMessage):
    """Instructions (role ``developer``, OpenAI's successor of ``system``)."""

    role: Literal["developer"]  # type: ignore[assignment]


class UserMessage(BaseModel):
    """A user turn."""

    model_config = STRICT
    role: Literal["user"]
    content: str | list[UserPart]
    name: str | None = None

    def text(self) -> str:
        """The message's text (media parts are refused before this is asked)."""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


class FunctionCall(BaseModel):
    """The function a tool call named, with its arguments as JSON text."""

    model_config = STRICT
    name: str
    arguments: str


class ToolCall(BaseModel):
    """A tool call an assistant made earlier in the conversation."""

    model_config = STRICT
    id: str
    type: Literal["function"]
    function: FunctionCall


class AssistantMessage(BaseModel):
    """An assistant turn: content, or tool calls, or both (replayed history)."""

    model_config = STRICT
    role: Literal["assistant"]
    content: str | list[AssistantPart] | None = None
    name: str | None = None
    refusal: str | None = None
    tool_calls: list[ToolCall] | None = None
    function_call: FunctionCall | None = None
    audio: dict[str, Any] | None = None

    def text(self) -> str:
        """The message's text; earlier tool calls are rendered as their JSON, so the model
        sees what was called."""
        text = _join(self.content) or (self.refusal or "")
        if self.tool_calls:
            calls = [call.model_dump() for call in self.tool_calls]
            text += ("\n" if text else "") + json.dumps(calls, separators=(",", ":"))
        return text


class ToolMessage(BaseModel):
    """A tool's answer to an earlier tool call."""

    model_config = STRICT
    role: Literal["tool"]
    content: str | list[TextPart]
    tool_call_id: str

    def text(self) -> str:
        """The tool's answer."""
        return _join(self.content)


Message = Annotated[
    SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage,
    Field(discriminator="role"),
]


def unreadable_parts(messages: list[Message]) -> tuple[str, str] | None:
    """The ``param`` path and type of the first content part this engine cannot read."""
    for number, message in enumerate(messages):
        if isinstance(message, UserMessage) and not isinstance(message.content, str):
            for index, part in enumerate(message.content):
                if isinstance(part, MediaPart):
                    return f"messages[{number}].content[{index}].type", part.type
    return None
