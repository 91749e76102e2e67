"""The apiserver's answers as the reconcile core reads them: permanent or temporary.

The client maps the official client's exceptions (``flexinfer_common.kube.client``); at the
runtime's boundary this decides which of them a retry can fix:

- 400 BadRequest, 422 Invalid (``ApiRejectedError``): the rendered object is refused as
  written, and sending it again fails the same way: ``PermanentError``, which the reconcile
  writes to the Model's status and does not retry until the spec changes;
- 409 Conflict, left over after the Applier's own re-reads: ``TemporaryError``;
- 429, 5xx and an unreachable apiserver (``StoreError``) are ``TemporaryError`` already,
  with the apiserver's Retry-After or the client's delay, and pass as they are.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, ParamSpec, TypeVar

from flexinfer_common.errors import ConflictError, PermanentError, TemporaryError
from flexinfer_common.kube.client import ApiRejectedError

P = ParamSpec("P")
T = TypeVar("T")
CONFLICT_DELAY_S = 1.0
"""A conflict is another writer's update in between: the next read sees it."""


@contextlib.contextmanager
def cluster_errors(what: str) -> Iterator[None]:
    """Map the apiserver's refusals within the block to PermanentError or TemporaryError."""
    try:
        yield
    except ApiRejectedError as exc:
        raise PermanentError(f"{what}: {exc}", status_reason=exc.status_reason) from exc
    except ConflictError as exc:
        raise TemporaryError(
            f"{what}: {exc}", delay=CONFLICT_DELAY_S, status_reason="Conflict"
        ) from exc


def cluster_call(
    what: str,
) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Coroutine[Any, Any, T]]]:
    """A method decorator: the method's body within ``cluster_errors(what)``."""

    def decorate(method: Callable[P, Awaitable[T]]) -> Callable[P, Coroutine[Any, Any, T]]:
        @functools.wraps(method)
        async def mapped(*args: P.args, **kwargs: P.kwargs) -> T:
            with cluster_errors(what):
                return await method(*args, **kwargs)

        return mapped

    return decorate
