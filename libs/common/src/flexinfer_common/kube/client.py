"""The official ``kubernetes`` client, in worker threads, with errors mapped at the boundary.

404 NotFoundError, 409 ConflictError (name taken, stale resourceVersion), 400 and 422
ApiRejectedError (an InvalidSpecError: the object as written is refused), 410
ResourceExpiredError (a watch's resourceVersion was compacted), anything else (429, 5xx, and
an unreachable apiserver) StoreError, which is temporary: its delay is the apiserver's
Retry-After where it sent one. Each carries the apiserver's Status reason (``Invalid``,
``TooManyRequests``) as ``status_reason`` for conditions.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import anyio.to_thread
import urllib3.exceptions
from kubernetes import client as kube_client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.watch.watch import iter_resp_lines

from flexinfer_common.errors import (
    ConfigError,
    ConflictError,
    InvalidSpecError,
    NotFoundError,
    StoreError,
)

T = TypeVar("T")
Obj = dict[str, Any]
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
REQUEST_TIMEOUT = (5.0, 30.0)
"""(connect, read) seconds per call: an unreachable apiserver fails fast."""
POOL_SIZE = 16
"""HTTP connections kept per client, unless the caller needs more (bursts of claims)."""
RETRY_S = 2.0
"""The delay of a StoreError without Retry-After: the apiserver overloaded, restarting or
unreachable is seldom back within a second."""
_MAX_RETRY_AFTER_S = 30.0


class ResourceExpiredError(StoreError):
    """410: the resourceVersion a watch asked for is older than the apiserver's history."""


class ApiRejectedError(InvalidSpecError):
    """400 BadRequest or 422 Invalid: the apiserver refuses the object as written; sending it
    again fails the same way."""

    def __init__(self, message: str, *, status_reason: str) -> None:
        super().__init__(message)
        self.status_reason = status_reason


@dataclass(frozen=True)
class Resource:
    """A custom resource type: where its REST paths live and what its objects are called."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        """``group/version``, as objects carry it."""
        return f"{self.group}/{self.version}"


def configuration(
    host: str | None = None,
    token: str | None = None,
    kubeconfig: str | None = None,
    pool_size: int = POOL_SIZE,
) -> Any:
    """Client settings: ``host`` if given, else in-cluster, else ``kubeconfig``, $KUBECONFIG
    or ~/.kube/config."""
    if host is not None:
        config = kube_client.Configuration(host=host)
        if token:
            config.api_key = {"authorization": f"Bearer {token}"}
    else:
        config = kube_client.Configuration()
        try:
            kube_config.load_incluster_config(client_configuration=config)
        except ConfigException:
            try:
                path = kubeconfig or os.environ.get("KUBECONFIG") or None
                kube_config.load_kube_config(config_file=path, client_configuration=config)
            except (ConfigException, OSError) as exc:
                raise ConfigError(f"no Kubernetes configuration found: {exc}") from exc
    config.connection_pool_maxsize = pool_size
    config.retries = 1
    return config


_REASONS = {400: "BadRequest", 422: "Invalid", 429: "TooManyRequests"}
"""Status reasons for an answer without a Status body (a proxy's, say)."""


def _status(exc: ApiException) -> dict[str, Any]:
    """The apiserver's Status object in the response body ({} when there is none)."""
    try:
        body = json.loads(exc.body or "{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _retry_after(exc: ApiException) -> float:
    """The Retry-After header (seconds) the apiserver sent with a 429 or 5xx, else RETRY_S."""
    value = (exc.headers or {}).get("Retry-After")
    try:
        return min(max(float(value), 0.1), _MAX_RETRY_AFTER_S) if value else RETRY_S
    except ValueError:
        return RETRY_S


@contextlib.contextmanager
def api_errors(what: str) -> Iterator[None]:
    """Map the client's errors to flexinfer_common.errors."""
    try:
        yield
    except ApiException as exc:
        status = _status(exc)
        message = f"kubernetes {what}: {exc.status} {status.get('message') or exc.reason}"
        mapped = {404: NotFoundError, 409: ConflictError, 410: ResourceExpiredError}.get(exc.status)
        if mapped is not None:
            raise mapped(message) from exc
        reason = str(status.get("reason") or "") or _REASONS.get(exc.status, "ApiServerError")
        if exc.status in (400, 422):
            raise ApiRejectedError(message, status_reason=reason) from exc
        raise StoreError(message, delay=_retry_after(exc), status_reason=reason) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise StoreError(
            f"kubernetes {what}: apiserver unreachable or stream broken: {exc}",
            delay=RETRY_S,
            status_reason="ApiServerUnreachable",
        ) from exc


class WatchStream:
    """One watch request's events (blocking; iterate in a worker thread), stoppable."""

    def __init__(self, open_response: Callable[[], Any], what: str) -> None:
        self._open = open_response
        self._what = what
        self._response: Any = None
        self._stopped = threading.Event()

    def __iter__(self) -> Iterator[Obj]:
        with api_errors(self._what):
            self._response = response = self._open()
            try:
                if self._stopped.is_set():
                    return
                for line in iter_resp_lines(response):
                    if line:
                        yield cast(Obj, json.loads(line))
            finally:
                response.close()
                response.release_conn()

    def stop(self) -> None:
        """Unblock the reading thread (the socket is shut down) and end the stream."""
        self._stopped.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):  # already closed or released
                response.shutdown()


async def list_json(
    client: KubeClient, what: str, lister: Callable[..., Any]
) -> tuple[list[Obj], str]:
    """A list call's items (as dicts) and its resourceVersion, read as JSON in the worker
    thread: the typed models refuse the partial statuses some kubelets write."""

    def raw(**kwargs: Any) -> Any:
        response = lister(_preload_content=False, **kwargs)
        try:
            return json.loads(response.data)
        finally:
            response.release_conn()

    body = cast(dict[str, Any], await client.call(what, raw))
    items = cast(list[Obj], body.get("items") or [])
    return items, str(body["metadata"]["resourceVersion"])


def watch_kwargs(resource_version: str, timeout_s: int) -> dict[str, Any]:
    """The keyword arguments (besides ``watch=True``, which each caller names, so that a scan
    of the calls sees what is watched) of a list call that watches after ``resource_version``."""
    return {
        "resource_version": resource_version,
        "allow_watch_bookmarks": True,
        "timeout_seconds": timeout_s,
        "_preload_content": False,
        # The read timeout outlasts the server's own end of the stream.
        "_request_timeout": (REQUEST_TIMEOUT[0], timeout_s + 30),
    }


class KubeClient:
    """One API client (connection pool) for custom objects, core objects and Jobs."""

    def __init__(
        self,
        host: str | None = None,
        token: str | None = None,
        kubeconfig: str | None = None,
        *,
        pool_size: int = POOL_SIZE,
    ) -> None:
        self._api_client = kube_client.ApiClient(configuration(host, token, kubeconfig, pool_size))
        self.custom = kube_client.CustomObjectsApi(self._api_client)
        self.core = kube_client.CoreV1Api(self._api_client)
        self.batch = kube_client.BatchV1Api(self._api_client)
        self._closed = False

    @property
    def api_client(self) -> Any:
        """The official client's ApiClient (for REST paths no typed API class covers)."""
        return self._api_client

    async def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in a worker thread, its errors mapped."""
        call = functools.partial(fn, *args, _request_timeout=REQUEST_TIMEOUT, **kwargs)

        def run() -> T:
            with api_errors(what):
                return call()

        return await anyio.to_thread.run_sync(run)

    async def close(self) -> None:
        """Close the connection pool; idempotent."""
        if not self._closed:
            self._closed = True
            await anyio.to_thread.run_sync(self._close)

    def _close(self) -> None:
        self._api_client.close()
        # ApiClient.close only stops its thread pool; the sockets live in urllib3's pool.
        self._api_client.rest_client.pool_manager.clear()
