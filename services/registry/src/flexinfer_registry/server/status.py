"""Core errors -> gRPC statuses, with details a program can read.

Every refused call ends with a status code, a one-line message (``details()``) and a
``google.rpc.Status`` in the ``grpc-status-details-bin`` trailer (read it with
``grpc_status.rpc_status.from_call``): a ``google.rpc.BadRequest`` naming each offending
field and why for INVALID_ARGUMENT, else a ``google.rpc.ErrorInfo`` whose ``reason`` is the
error's kind (``SOURCE_NOT_ALLOWED``, ``NOT_FOUND``...), in domain ``registry.flexinfer.ai``.
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status  # type: ignore[import-untyped]

from flexinfer_common.errors import (
    ConfigError,
    ConflictError,
    FlexInferError,
    InvalidSpecError,
    NotFoundError,
    PermanentError,
    TemporaryError,
)
from flexinfer_registry.core.download_status import CacheFullError
from flexinfer_registry.core.identity import InvalidFieldsError
from flexinfer_registry.core.providers.base import AccessDeniedError, SourceNotAllowedError

DOMAIN = "registry.flexinfer.ai"
MAX_MESSAGE = 1000
"""Characters of the one-line message: what a log line or a terminal shows whole."""

_CODES: tuple[tuple[type[FlexInferError], grpc.StatusCode], ...] = (
    (SourceNotAllowedError, grpc.StatusCode.PERMISSION_DENIED),
    (AccessDeniedError, grpc.StatusCode.PERMISSION_DENIED),
    (CacheFullError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (InvalidSpecError, grpc.StatusCode.INVALID_ARGUMENT),
    (ConfigError, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFoundError, grpc.StatusCode.NOT_FOUND),
    (ConflictError, grpc.StatusCode.FAILED_PRECONDITION),
    (PermanentError, grpc.StatusCode.FAILED_PRECONDITION),
    (TemporaryError, grpc.StatusCode.UNAVAILABLE),
)


def status_code(exc: FlexInferError) -> grpc.StatusCode:
    """The gRPC status for one of our errors."""
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return code
    return grpc.StatusCode.INTERNAL


def _reason(exc: FlexInferError) -> str:
    """``SourceNotAllowedError`` -> ``SOURCE_NOT_ALLOWED`` (ErrorInfo's UPPER_SNAKE_CASE)."""
    name = type(exc).__name__.removesuffix("Error")
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


def _detail(exc: FlexInferError) -> any_pb2.Any:
    detail = any_pb2.Any()
    if isinstance(exc, InvalidFieldsError):
        violations = [
            error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.reason)
            for v in exc.violations[:100]
        ]
        detail.Pack(error_details_pb2.BadRequest(field_violations=violations))
    elif isinstance(exc, InvalidSpecError):
        violation = error_details_pb2.BadRequest.FieldViolation(
            field=exc.field or "", description=str(exc)[:MAX_MESSAGE]
        )
        detail.Pack(error_details_pb2.BadRequest(field_violations=[violation]))
    else:
        detail.Pack(error_details_pb2.ErrorInfo(reason=_reason(exc), domain=DOMAIN))
    return detail


def rich_status(exc: FlexInferError) -> grpc.Status:
    """The status, message and details a call refused with ``exc`` ends with."""
    code = status_code(exc)
    message = str(exc)[:MAX_MESSAGE] or code.name
    status = status_pb2.Status(code=getattr(code_pb2, code.name), message=message)
    status.details.append(_detail(exc))
    built: grpc.Status = rpc_status.to_status(status)
    return built


async def abort(context: Any, exc: FlexInferError) -> NoReturn:
    """End the call with the error's status, its message and its details."""
    status = rich_status(exc)
    await context.abort(status.code, status.details, status.trailing_metadata)
    raise AssertionError("unreachable")  # context.abort raises
