"""``KubeApiServer``: the fake apiserver in a thread, and the hooks tests drive it with.

Start it (``with KubeApiServer(crds=[...]) as api:``), point a client at ``api.url``, and
use the methods below to look at or change the state as a controller in the cluster (or
etcd) would. Every state change and every call notifies one condition, so ``wait_for``
(threads) and ``until`` (asyncio) wait on predicates without sleeping.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

from flexinfer_common.testing.kube_apiserver import logs, rest, watch, writes
from flexinfer_common.testing.kube_apiserver.errors import REASONS, ApiError, not_found
from flexinfer_common.testing.kube_apiserver.hooks import ANY, Call, Hooks, Match
from flexinfer_common.testing.kube_apiserver.http import ApiHttpServer, Handler
from flexinfer_common.testing.kube_apiserver.objects import ObjectStore, key_of
from flexinfer_common.testing.kube_apiserver.types import ResourceType, builtin_types, load_crds

Obj = dict[str, Any]
VERSION = {"major": "1", "minor": "31", "gitVersion": "v1.31.0-flexinfer-fake"}


class KubeApiServer:
    """An in-process apiserver on a free loopback port."""

    def __init__(self, crds: Iterable[Path] = (), *, history_limit: int = 1000) -> None:
        types = [*builtin_types(), *load_crds(crds)]
        self._types = {(t.group, t.version, t.plural): t for t in types}
        self._store = ObjectStore(history_limit)
        self._hooks = Hooks()
        self._http: ApiHttpServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> KubeApiServer:
        """Listen and serve in a daemon thread."""
        self._http = ApiHttpServer(self._serve)
        self._thread = threading.Thread(
            target=self._http.serve_forever, args=(0.05,), name="kube-apiserver", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """End every watch, cut every connection and stop listening."""
        with self._store.cond:
            self._store.closed = True
            self._store.notify()
        if self._http is not None:
            self._http.shutdown()
            self._http.cut_connections()
            self._http.server_close()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def __enter__(self) -> KubeApiServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """http://127.0.0.1:PORT."""
        assert self._http is not None, "start() the server first"
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    # -- serving ----------------------------------------------------------------------

    def _serve(self, request: rest.Request, handler: Handler) -> None:
        if request.path == "/version":
            handler.send_json(rest.Answer(200, VERSION))
            return
        try:
            where = rest.route(self._types, request.path)
            call = rest.call_of(request, where)
            with self._store.cond:
                self._hooks.calls.append(call)
                fault = self._hooks.fault_for(call)
                self._store.notify()
            if fault is not None:
                raise fault
            answer = rest.handle(self._store, request, where)
        except ApiError as exc:
            handler.send_json(rest.Answer(exc.code, exc.status()))
            return
        with self._store.cond:
            afters = self._hooks.afters_for(call)
        for action in afters:
            action()
        if answer.watch is not None:
            self._stream(answer.watch, handler)
        elif answer.follow is not None:
            self._follow(answer.text or "", answer.follow, handler)
        else:
            handler.send_json(answer)

    def _stream(self, request: watch.WatchRequest, handler: Handler) -> None:
        try:
            since, initial = watch.start(self._store, request)
        except ApiError as exc:
            handler.send_json(rest.Answer(exc.code, exc.status()))
            return
        store, name = self._store, request.rt.qualified
        try:
            handler.start_stream()
            for event in initial:
                handler.send_line(event)
            for item in watch.stream(store, request, since):
                if isinstance(item, watch.Drop):
                    handler.end_stream(abrupt=item.abrupt)
                    return
                handler.send_line(item)
            handler.end_stream(abrupt=False)
        except OSError:
            handler.close_connection = True  # the client went away
        finally:
            with store.cond:
                store.open_watches[name] -= 1
                store.notify()

    def _follow(self, text: str, request: logs.LogFollow, handler: Handler) -> None:
        """A followed pod log: ``text``, then what is appended, until the stream ends."""
        try:
            handler.start_stream("text/plain")
            if text:
                handler.send_chunk(text.encode())
            for more in logs.follow(self._store, request, handler.connection):
                handler.send_chunk(more.encode())
            handler.end_stream(abrupt=False)
        except OSError:
            handler.close_connection = True  # the client went away

    # -- looking at and changing state --------------------------------------------------

    def resource(self, name: str) -> ResourceType:
        """A served type by plural, ``plural.group`` or kind."""
        for rt in self._types.values():
            if name in (rt.plural, rt.qualified, rt.kind):
                return rt
        raise KeyError(f"no resource {name!r}")

    @property
    def resource_version(self) -> int:
        """The latest resourceVersion issued."""
        with self._store.cond:
            return self._store.rv

    def objects(self, resource: str | None = None, namespace: str | None = None) -> list[Obj]:
        """Copies of the stored objects (of one resource, in one namespace), ordered by key."""
        with self._store.cond:
            return [
                copy.deepcopy(obj)
                for key, obj in sorted(self._store.objects.items())
                if (resource is None or self.resource(resource).plural == key[1])
                and (namespace is None or key[2] == namespace)
            ]

    def get(self, resource: str, namespace: str | None, name: str) -> Obj | None:
        """A copy of one object, or None."""
        rt = self.resource(resource)
        with self._store.cond:
            found = self._store.get(key_of(rt, namespace if rt.namespaced else None, name))
            return copy.deepcopy(found)

    def create(self, resource: str, obj: Obj, namespace: str | None = None) -> Obj:
        """Create as a client would (defaults, validation, events)."""
        rt = self.resource(resource)
        ns = namespace or (obj.get("metadata") or {}).get("namespace") or "default"
        with self._store.cond:
            return writes.create(self._store, rt, ns if rt.namespaced else None, obj)

    def patch(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        patch: Obj,
        *,
        subresource: str | None = None,
    ) -> Obj:
        """A JSON merge patch, as a client would send it (status with ``subresource="status"``)."""
        from flexinfer_common.testing.kube_apiserver.patch import merge_patch

        rt = self.resource(resource)
        key = key_of(rt, namespace if rt.namespaced else None, name)
        with self._store.cond:
            current = self._store.get(key)
            if current is None:
                raise not_found(rt.qualified, name)
            wanted = merge_patch(current, patch)
            status_only = subresource == "status"
            return writes.update(self._store, rt, key, wanted, status_only=status_only, put=False)

    def set_status(self, resource: str, namespace: str | None, name: str, status: Obj) -> Obj:
        """Replace the status, as the controller that owns it would (a Deployment's, say)."""
        rt = self.resource(resource)
        key = key_of(rt, namespace if rt.namespaced else None, name)
        with self._store.cond:
            current = self._store.get(key)
            if current is None:
                raise not_found(rt.qualified, name)
            wanted = {**copy.deepcopy(current), "status": copy.deepcopy(status)}
            return writes.update(self._store, rt, key, wanted, status_only=True, put=False)

    def edit(
        self, resource: str, namespace: str | None, name: str, fn: Callable[[Obj], None]
    ) -> Obj:
        """Change the stored object in place, past every check (a new resourceVersion, MODIFIED)."""
        rt = self.resource(resource)
        key = key_of(rt, namespace if rt.namespaced else None, name)
        with self._store.cond:
            current = self._store.get(key)
            if current is None:
                raise not_found(rt.qualified, name)
            new = copy.deepcopy(current)
            fn(new)
            new["metadata"]["resourceVersion"] = self._store.next_rv()
            self._store.objects[key] = new
            self._store.emit("MODIFIED", rt, new, current)
            return copy.deepcopy(new)

    def delete(self, resource: str, namespace: str | None, name: str) -> None:
        """Delete as a client would (finalizers hold the object)."""
        rt = self.resource(resource)
        with self._store.cond:
            writes.delete(
                self._store, rt, key_of(rt, namespace if rt.namespaced else None, name), {}
            )

    def set_pod_log(self, namespace: str, name: str, text: str) -> None:
        """The text GET .../pods/NAME/log answers."""
        with self._store.cond:
            self._store.logs[(namespace, name)] = text
            self._store.notify()

    def append_pod_log(self, namespace: str, name: str, text: str) -> None:
        """Add ``text`` to the pod's log: open ``follow=true`` reads receive it."""
        with self._store.cond:
            self._store.logs[(namespace, name)] = self._store.logs.get((namespace, name), "") + text
            self._store.notify()

    # -- watches ------------------------------------------------------------------------

    def compact(self) -> None:
        """Forget the watch history: a watch from any earlier resourceVersion gets 410."""
        self._store.compact()

    def set_history_limit(self, events: int) -> None:
        """Keep only the last ``events`` events for watches (trimmed at the next write)."""
        with self._store.cond:
            self._store.history_limit = events

    def drop_watches(self, *, abrupt: bool = False) -> None:
        """End every open watch: cleanly (as a server timeout does) or by cutting it."""
        with self._store.cond:
            self._store.drop_epoch += 1
            self._store.drop_abrupt = abrupt
            self._store.notify()

    def bookmark(self) -> None:
        """Have every watch that allows bookmarks send one at the current resourceVersion."""
        with self._store.cond:
            self._store.bookmark_epoch += 1
            self._store.notify()

    def open_watches(self, resource: str) -> int:
        """How many watches of ``resource`` are streaming now."""
        with self._store.cond:
            return self._store.open_watches[self.resource(resource).qualified]

    # -- calls and faults -----------------------------------------------------------------

    @property
    def calls(self) -> list[Call]:
        """Every routed call so far, in order."""
        with self._store.cond:
            return list(self._hooks.calls)

    def count(
        self,
        verb: str = ANY,
        resource: str = ANY,
        subresource: str | None = ANY,
        name: str | None = ANY,
    ) -> int:
        """How many calls matched."""
        with self._store.cond:
            return self._hooks.count(Match(verb, resource, subresource, name))

    def inject(
        self,
        code: int,
        *,
        verb: str = ANY,
        resource: str = ANY,
        subresource: str | None = ANY,
        name: str | None = ANY,
        times: int = 1,
        message: str | None = None,
    ) -> None:
        """Answer the next ``times`` matching calls with ``code`` (a Status), unhandled."""
        error = ApiError(code, message or f"injected {code} {REASONS.get(code, '')}".strip())
        with self._store.cond:
            self._hooks.inject(Match(verb, resource, subresource, name), error, times)

    def clear_faults(self) -> None:
        """Forget the injected faults not yet used up (the next calls are handled again)."""
        with self._store.cond:
            self._hooks.clear_faults()

    def after(
        self,
        action: Callable[[], object],
        *,
        verb: str = ANY,
        resource: str = ANY,
        subresource: str | None = ANY,
        name: str | None = ANY,
        times: int = 1,
    ) -> None:
        """Run ``action`` after a matching call was handled and before it is answered."""
        with self._store.cond:
            self._hooks.after(Match(verb, resource, subresource, name), action, times)

    # -- waiting ------------------------------------------------------------------------

    def wait_for(self, predicate: Callable[[KubeApiServer], bool], within_s: float = 30.0) -> None:
        """Block until ``predicate(self)`` holds, re-checked at every change and call."""
        with self._store.cond:
            if not self._store.cond.wait_for(lambda: predicate(self), within_s):
                raise TimeoutError(f"condition not met within {within_s}s: {predicate}")

    async def until(
        self, predicate: Callable[[KubeApiServer], bool], within_s: float = 30.0
    ) -> None:
        """``wait_for`` from asyncio code, without blocking the event loop."""
        await asyncio.to_thread(self.wait_for, predicate, within_s)
