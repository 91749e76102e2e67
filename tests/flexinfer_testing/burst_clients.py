"""Clients for a burst against a cold model, each classifying what it got.

An outcome is one short label: "200" (a whole JSON answer), "200-stream" (an SSE stream
that ended with ``data: [DONE]``), "503" (with a Retry-After header and an OpenAI-shaped
body), and anything else names what went wrong ("500", "reset", "hang", "503-no-retry",
"200-then-error", "200-cut-short", ...).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import httpx
import openai
from openai.types.chat import ChatCompletionMessageParam

GOOD = frozenset({"200", "200-stream", "503"})
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


def _refusal(status: int, headers: Mapping[str, str], body: bytes) -> str:
    if status != 503:
        return str(status)
    if not headers.get("retry-after", "").isdigit():
        return "503-no-retry"
    try:
        error = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return "503-not-openai"
    return "503" if error.get("code") == "queue_full" or error.get("message") else "503-bare"


def classify_stream(body: bytes) -> str:
    """What a 200 SSE body says: whole, cut short, or ended by an error event."""
    events = [line for line in body.split(b"\n") if line.startswith(b"data:")]
    if any(b'"error"' in event for event in events):
        return "200-then-error"
    if not events or events[-1].strip() != b"data: [DONE]":
        return "200-cut-short"
    return "200-stream"


async def httpx_chat(http: httpx.AsyncClient, url: str, *, stream: bool) -> str:
    """One chat completion through httpx; its outcome."""
    body = {"model": "tiny", "messages": MESSAGES, "stream": stream}
    try:
        async with http.stream("POST", f"{url}/v1/chat/completions", json=body) as reply:
            data = await reply.aread()
    except httpx.TimeoutException:
        return "hang"
    except httpx.TransportError:
        return "reset"
    if reply.status_code != 200:
        return _refusal(reply.status_code, reply.headers, data)
    if stream:
        return classify_stream(data)
    try:
        answer = json.loads(data)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return "200-bad-body"
    return "200" if answer else "200-bad-body"


async def sdk_chat(client: openai.AsyncOpenAI, *, stream: bool) -> str:
    """One chat completion through the openai SDK; its outcome."""
    try:
        if not stream:
            completion = await client.chat.completions.create(model="tiny", messages=MESSAGES)
            return "200" if completion.choices[0].message.content else "200-bad-body"
        # The raw stream, so that its end (``data: [DONE]``, or not) is seen too.
        streaming = client.chat.completions.with_streaming_response
        async with streaming.create(model="tiny", messages=MESSAGES, stream=True) as reply:
            return classify_stream(await reply.read())
    except openai.APIStatusError as exc:
        response = exc.response
        return _refusal(response.status_code, response.headers, response.content)
    except openai.APITimeoutError:
        return "hang"
    except openai.APIConnectionError:
        return "reset"
    except openai.APIError:
        return "200-then-error"  # an error event inside a 200 stream
