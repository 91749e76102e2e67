"""REST routing: a request's path and method to a verb on a resource, and its answer.

Paths: ``/api/v1[/namespaces/NS]/PLURAL[/NAME[/SUB]]`` for the core group and
``/apis/GROUP/VERSION[/namespaces/NS]/PLURAL[/NAME[/SUB]]`` for the others; a list of a
namespaced type without a namespace lists every namespace. Namespaces are implicit: an
object may be created in one that was never created.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from flexinfer_common.testing.kube_apiserver import logs, writes
from flexinfer_common.testing.kube_apiserver.errors import ApiError, not_found
from flexinfer_common.testing.kube_apiserver.hooks import Call
from flexinfer_common.testing.kube_apiserver.objects import ObjectStore, key_of
from flexinfer_common.testing.kube_apiserver.patch import apply_patch
from flexinfer_common.testing.kube_apiserver.selectors import field_selector, label_selector
from flexinfer_common.testing.kube_apiserver.types import ResourceType
from flexinfer_common.testing.kube_apiserver.watch import WatchRequest


@dataclass
class Request:
    """One parsed HTTP request."""

    method: str
    path: str
    query: dict[str, str]
    body: Any
    content_type: str


@dataclass
class Route:
    """Where a request points."""

    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None


@dataclass
class Answer:
    """A JSON answer, a plain-text one (``text``, streamed on with ``follow``), or a watch."""

    code: int
    body: Any = None
    text: str | None = None
    watch: WatchRequest | None = None
    follow: logs.LogFollow | None = None
    extra: dict[str, str] = field(default_factory=dict)


def route(types: dict[tuple[str, str, str], ResourceType], path: str) -> Route:
    """The resource, namespace, name and subresource of a path (404 if none)."""
    segs = [s for s in path.split("/") if s]
    if len(segs) >= 2 and segs[0] == "api":
        group, version, rest = "", segs[1], segs[2:]
    elif len(segs) >= 3 and segs[0] == "apis":
        group, version, rest = segs[1], segs[2], segs[3:]
    else:
        raise ApiError(404, f"the server could not find the requested resource ({path})")
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    rt = types.get((group, version, rest[0])) if rest else None
    if rt is None or len(rest) > 3 or (namespace is not None and not rt.namespaced):
        raise ApiError(404, f"the server could not find the requested resource ({path})")
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if name is not None and rt.namespaced and namespace is None:
        raise ApiError(404, f"the server could not find the requested resource ({path})")
    allowed = rt.extra_subresources | ({"status"} if rt.status_subresource else set())
    if sub is not None and sub not in allowed:
        raise ApiError(404, f"the server could not find the requested resource ({path})")
    return Route(rt, namespace, name, sub)


def _is_watch(query: dict[str, str]) -> bool:
    return query.get("watch", "").lower() in ("true", "1")


def verb_of(request: Request, where: Route) -> str:
    """The RBAC verb of a request."""
    if where.name is None:
        if request.method == "GET":
            return "watch" if _is_watch(request.query) else "list"
        return {"POST": "create", "DELETE": "deletecollection"}.get(request.method, "unknown")
    return {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        request.method, "unknown"
    )


def call_of(request: Request, where: Route) -> Call:
    """The request as the call log records it."""
    verb = verb_of(request, where)
    return Call(
        verb, where.rt.group, where.rt.plural, where.subresource, where.namespace, where.name
    )


def _list(store: ObjectStore, request: Request, where: Route) -> Answer:
    labels = label_selector(request.query.get("labelSelector"))
    fields = field_selector(request.query.get("fieldSelector"))
    if _is_watch(request.query):
        watch = WatchRequest(
            where.rt,
            where.namespace,
            lambda o: labels(o) and fields(o),
            request.query.get("resourceVersion"),
            request.query.get("allowWatchBookmarks", "").lower() in ("true", "1"),
            float(request.query["timeoutSeconds"]) if "timeoutSeconds" in request.query else None,
        )
        return Answer(200, watch=watch)
    with store.cond:
        items = [o for o in store.items(where.rt, where.namespace) if labels(o) and fields(o)]
        version = str(store.rv)
    rt = where.rt
    body = {
        "apiVersion": rt.api_version,
        "kind": f"{rt.kind}List",
        "metadata": {"resourceVersion": version},
        "items": items,
    }
    return Answer(200, body)


def _log(store: ObjectStore, request: Request, where: Route) -> Answer:
    assert where.name is not None
    namespace = where.namespace or ""
    text, offset = logs.read(store, where.rt, namespace, where.name, request.query.get("tailLines"))
    if request.query.get("follow", "").lower() in ("true", "1"):
        return Answer(
            200, text=text, follow=logs.LogFollow(where.rt, namespace, where.name, offset)
        )
    return Answer(200, text=text)


def _item(store: ObjectStore, request: Request, where: Route) -> Answer:
    assert where.name is not None
    rt, sub = where.rt, where.subresource
    if sub == "log":
        if request.method != "GET":
            raise ApiError(405, f"{request.method} is not allowed on pods/log")
        return _log(store, request, where)
    key = key_of(rt, where.namespace, where.name)
    status_only = sub == "status"
    with store.cond:
        current = store.get(key)
        if request.method == "GET":
            if current is None:
                raise not_found(rt.qualified, where.name)
            return Answer(200, copy.deepcopy(current))
        if request.method == "PUT":
            obj = writes.update(store, rt, key, request.body, status_only=status_only, put=True)
            return Answer(200, obj)
        if request.method == "PATCH":
            if current is None:
                raise not_found(rt.qualified, where.name)
            wanted = apply_patch(request.content_type, current, request.body)
            obj = writes.update(store, rt, key, wanted, status_only=status_only, put=False)
            return Answer(200, obj)
        if request.method == "DELETE" and not status_only:
            code, obj = writes.delete(store, rt, key, request.body or {})
            return Answer(code, obj)
    raise ApiError(405, f"{request.method} is not allowed on {rt.qualified}")


def handle(store: ObjectStore, request: Request, where: Route) -> Answer:
    """Serve one routed request (watches are answered with their WatchRequest)."""
    if request.query.get("dryRun"):
        raise ApiError(400, "dryRun is not supported by this fake apiserver")
    if where.name is None:
        if request.method == "GET":
            return _list(store, request, where)
        if request.method == "POST":
            with store.cond:
                return Answer(201, writes.create(store, where.rt, where.namespace, request.body))
        raise ApiError(405, f"{request.method} is not allowed on a {where.rt.qualified} list")
    return _item(store, request, where)
