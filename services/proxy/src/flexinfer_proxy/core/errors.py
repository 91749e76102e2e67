"""Errors the proxy answers clients with; each carries its OpenAI error code."""

from __future__ import annotations

from flexinfer_common.errors import FlexInferError, InvalidSpecError, NotFoundError, TemporaryError


def format_seconds(seconds: float) -> str:
    """60.0 -> "60s", 2.5 -> "2.5s": how timeouts read in messages."""
    return f"{seconds:g}s"


class BadRequestError(InvalidSpecError):
    """The request cannot name a model: malformed JSON, no or an invalid ``model``."""


class ModelNotFoundError(NotFoundError):
    """No Model of the proxy's namespace answers to the requested name."""

    code = "model_not_found"

    def __init__(self, name: str) -> None:
        super().__init__(f"The model '{name}' does not exist")
        self.name = name


class QueueFullError(TemporaryError):
    """The model's cold-start queue holds max_queue_size requests already."""

    code = "queue_full"

    def __init__(self, model: str, size: int, *, delay: float) -> None:
        super().__init__(
            f"model {model} is starting and its queue is full ({size} requests waiting)",
            delay=delay,
        )


class ActivationTimeoutError(TemporaryError):
    """The model did not get a ready endpoint before the request's deadline."""

    code = "activation_timeout"

    def __init__(self, model: str, waited_s: float, *, delay: float) -> None:
        super().__init__(
            f"model {model} activation timed out after {format_seconds(waited_s)}", delay=delay
        )


class RouteNotFoundError(NotFoundError):
    """No backend serves this route, or the model's backend does not (HTTP 404)."""

    code = "not_found"


class ModelUnavailableError(TemporaryError):
    """The controller reports that the model cannot start now: Failed, or blocked (503).

    Answered at once, with the controller's reason, instead of queueing the request until
    its wait budget runs out.
    """

    code = "model_unavailable"

    def __init__(self, model: str, reason: str, *, delay: float) -> None:
        super().__init__(f"model {model} cannot start: {reason}", delay=delay)


class UpstreamError(TemporaryError):
    """The engine failed or could not be reached (HTTP 502)."""

    code = "upstream_error"


class MethodNotAllowedError(FlexInferError):
    """A proxied route asked for with another method than POST (HTTP 405)."""

    code = "method_not_allowed"
