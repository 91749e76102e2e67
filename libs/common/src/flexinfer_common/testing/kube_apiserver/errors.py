"""API errors as the apiserver answers them: an HTTP code and a ``Status`` object."""

from __future__ import annotations

from typing import Any

REASONS = {
    400: "BadRequest",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
"""The ``reason`` the real apiserver puts in a Status for each code."""

CONFLICT_DETAIL = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


class ApiError(Exception):
    """An error answer: HTTP code, Status reason and message."""

    def __init__(self, code: int, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")

    def status(self) -> dict[str, Any]:
        """The ``Status`` object the apiserver sends as the body (or in a watch ERROR event)."""
        return failure_status(self.code, self.reason, self.message)


def failure_status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A ``metav1.Status`` of a failed request."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def conflict(kind: str, name: str) -> ApiError:
    """409 for a stale ``metadata.resourceVersion`` (the message kubectl users know)."""
    return ApiError(409, f'Operation cannot be fulfilled on {kind} "{name}": {CONFLICT_DETAIL}')


def not_found(plural: str, name: str) -> ApiError:
    """404 for an absent object."""
    return ApiError(404, f'{plural} "{name}" not found')


def invalid(kind: str, name: str, detail: str) -> ApiError:
    """422 for an object that fails validation."""
    return ApiError(422, f'{kind} "{name}" is invalid: {detail}')
