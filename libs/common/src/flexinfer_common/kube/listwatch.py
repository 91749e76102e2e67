"""Where an informer lists and watches core/v1 objects: nodes, pods, ConfigMaps.

Lists and watch events are read as JSON, never through the typed models (which refuse the
partial statuses some kubelets write). A label selector narrows both on the apiserver; a
``keep`` predicate narrows them here, for what no selector can say (a name suffix). Names
never change, so a predicate on the name drops an object's every event alike.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from flexinfer_common.kube.client import KubeClient, Obj, WatchStream, list_json, watch_kwargs
from flexinfer_common.kube.informer import Stream


@dataclass(frozen=True)
class CoreKind:
    """One core/v1 kind: its name and the CoreV1Api methods that list it."""

    kind: str
    cluster_lister: str
    """The method listing every object (of every namespace)."""
    namespaced_lister: str | None
    """The method listing one namespace's objects; None for cluster-scoped kinds."""


CORE_KINDS = {
    "nodes": CoreKind("Node", "list_node", None),
    "pods": CoreKind("Pod", "list_pod_for_all_namespaces", "list_namespaced_pod"),
    "configmaps": CoreKind(
        "ConfigMap", "list_config_map_for_all_namespaces", "list_namespaced_config_map"
    ),
}
"""plural -> kind: the core kinds an informer can follow."""


class FilteredStream:
    """A watch stream passing on only the events whose object ``keep`` accepts (and every
    BOOKMARK and ERROR, which carry no object of the kind)."""

    def __init__(self, stream: Stream, keep: Callable[[Obj], bool]) -> None:
        self._stream = stream
        self._keep = keep

    def __iter__(self) -> Iterator[Obj]:
        for event in self._stream:
            if event.get("type") in ("BOOKMARK", "ERROR") or self._keep(event.get("object") or {}):
                yield event

    def stop(self) -> None:
        """Stop the underlying stream."""
        self._stream.stop()


class CoreListWatch:
    """List and watch of one core kind, optionally narrowed by a label selector and ``keep``."""

    def __init__(
        self,
        client: KubeClient,
        plural: str,
        *,
        label_selector: str | None = None,
        keep: Callable[[Obj], bool] | None = None,
    ) -> None:
        try:
            self._core_kind = CORE_KINDS[plural]
        except KeyError:
            raise ValueError(f"no core kind {plural!r}: one of {sorted(CORE_KINDS)}") from None
        self._client = client
        self._selector = label_selector
        self._keep = keep
        self.kind = self._core_kind.kind
        self.plural = plural

    async def list(self, namespace: str | None) -> tuple[list[Obj], str]:
        """The matching objects (as dicts) and the list's resourceVersion."""
        items, version = await list_json(
            self._client, f"list {self.plural}", self._lister(namespace)
        )
        if self._keep is not None:
            items = [item for item in items if self._keep(item)]
        return items, version

    def watch(self, namespace: str | None, resource_version: str, timeout_s: int) -> Stream:
        """A watch of the matching objects after ``resource_version``."""
        opener = functools.partial(
            self._lister(namespace), watch=True, **watch_kwargs(resource_version, timeout_s)
        )
        stream = WatchStream(opener, f"watch {self.plural}")
        return stream if self._keep is None else FilteredStream(stream, self._keep)

    def _lister(self, namespace: str | None) -> Any:
        core, kind = self._client.core, self._core_kind
        selector = {} if self._selector is None else {"label_selector": self._selector}
        if namespace is None or kind.namespaced_lister is None:
            return functools.partial(getattr(core, kind.cluster_lister), **selector)
        return functools.partial(getattr(core, kind.namespaced_lister), namespace, **selector)
