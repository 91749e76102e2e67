"""The FlexInfer exception tree.

Every package raises these (or subclasses of them) and translates foreign errors at its
boundary with ``raise ... from exc``, so callers never need to know which driver failed::

    FlexInferError
    ├── ConfigError            settings or a declared object are invalid; retrying cannot help
    ├── InvalidSpecError       a Model (or other document) fails validation
    ├── NotFoundError          the named object does not exist
    ├── ConflictError          the object exists already, or changed under us (stale version)
    ├── PermanentError         an operation failed and will fail again the same way
    ├── BodyTooLargeError      a request body exceeds the server's limit (413)
    ├── BodyTimeoutError       a request body arrived too slowly (408)
    └── TemporaryError         an operation failed but may succeed later; ``delay`` hints when
        ├── BusError           the event bus could not be reached or refused an operation
        ├── StoreError         the SQL store could not be reached or refused an operation
        └── UnavailableError   a dependency (engine, upstream, peer) is not ready yet

HTTP transports map them to status codes in one place each; see ``http_status``.
"""

from __future__ import annotations


class FlexInferError(Exception):
    """Base of every error FlexInfer raises on purpose."""


class ConfigError(FlexInferError):
    """Settings or a declared object are invalid; retrying cannot help."""


class InvalidSpecError(FlexInferError):
    """A declared document (Model, adapter, ...) failed validation."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class NotFoundError(FlexInferError):
    """The named object does not exist."""


class ConflictError(FlexInferError):
    """The object exists already, or it changed since it was read."""


class PermanentError(FlexInferError):
    """An operation failed and will fail again the same way: do not retry.

    ``status_reason`` is a CamelCase word for a status condition's reason (``Invalid``);
    None: the caller picks one.
    """

    status_reason: str | None = None  # also for subclasses whose __init__ does not pass it

    def __init__(self, message: str, *, status_reason: str | None = None) -> None:
        super().__init__(message)
        self.status_reason = status_reason


class BodyTooLargeError(FlexInferError):
    """413: the request body exceeds the server's limit."""

    code = "request_too_large"


class BodyTimeoutError(FlexInferError):
    """408: the client sent its body too slowly."""

    code = "request_timeout"


class TemporaryError(FlexInferError):
    """An operation failed but may succeed later; ``delay`` is the suggested wait in seconds.

    ``status_reason`` is a CamelCase word for a status condition's reason (``Conflict``);
    None: the caller picks one.
    """

    status_reason: str | None = None  # also for subclasses whose __init__ does not pass it

    def __init__(
        self, message: str, *, delay: float = 1.0, status_reason: str | None = None
    ) -> None:
        super().__init__(message)
        self.delay = delay
        self.status_reason = status_reason


class BusError(TemporaryError):
    """The event bus could not be reached or refused an operation."""


class StoreError(TemporaryError):
    """The SQL store could not be reached or refused an operation."""


class UnavailableError(TemporaryError):
    """A dependency (engine, upstream, peer) is not ready yet."""


_HTTP_STATUS: tuple[tuple[type[FlexInferError], int], ...] = (
    (InvalidSpecError, 422),
    (ConfigError, 400),
    (NotFoundError, 404),
    (ConflictError, 409),
    (BodyTooLargeError, 413),
    (BodyTimeoutError, 408),
    (PermanentError, 500),
    (TemporaryError, 503),
)


def http_status(exc: FlexInferError) -> int:
    """The HTTP status code a transport should answer for ``exc``."""
    for kind, status in _HTTP_STATUS:
        if isinstance(exc, kind):
            return status
    return 500
