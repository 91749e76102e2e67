"""The apiserver side: informers of Nodes, benchmark ConfigMaps and (fair share) Pods.

Each kind is listed, then watched from the list's resourceVersion (resumed when a watch
ends, listed again on 410 Gone) by the informer shared with the controller
(``flexinfer_common.kube``), which keeps what each object means for placement, parsed once
per change: a Node's facts (and its row of the node columns), a ConfigMap's data, a Pod's
facts. A decision reads only memory; no request waits on the apiserver, except the first
ones, which wait (boundedly) for the first lists. The TPS a pod's scores look up is kept
per (namespace, backend, model, deployment) and device class until a benchmark ConfigMap
changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import anyio

from flexinfer_common.kube.client import KubeClient, Obj
from flexinfer_common.kube.informer import Change, Informer, object_name
from flexinfer_common.kube.listwatch import CoreListWatch
from flexinfer_common.placement import (
    BenchmarkResults,
    Malformed,
    NodeColumns,
    NodeFacts,
    PodFacts,
    node_facts,
)
from flexinfer_common.placement.facts import number
from flexinfer_common.placement.tps import (
    DEPLOYMENT_RESULTS_SUFFIX,
    TPS_KEY,
    deployment_configmap,
)
from flexinfer_scheduler.core.protocol import BadExtenderArgsError, parse_pod

ConfigMapData = Mapping[str, str]
RESULTS_KEPT = 1024
"""Pods' (namespace, backend, model, deployment) whose TPS lookups are kept; past it they
start over (each is a few dict entries; a cluster runs far fewer distinct models)."""


class InformerNodes:
    """Node names -> facts: the node informer's facts as columns, kept by its changes."""

    def __init__(self, informer: Informer[NodeFacts]) -> None:
        self._informer = informer
        self._columns = NodeColumns(informer.view().values())

    @property
    def columns(self) -> NodeColumns:
        """The nodes the informer has seen, one row each."""
        return self._columns

    def changed(self, change: Change) -> None:
        """The informer's change event (key: the node's name): update the node's row."""
        facts = self._informer.get(change.key)
        if facts is None:
            self._columns.remove(change.key)
        else:
            self._columns.upsert(facts)


class KubeBenchmarks:
    """The benchmark ConfigMaps of the pod's namespace, from the ConfigMap informer.

    One pod's results (and the TPS per device class they memoise) are kept for the next
    pod of the same model until any benchmark ConfigMap changes: a value that does not
    parse is then reported once per change, not once per request."""

    def __init__(self, configmaps: Informer[ConfigMapData], global_name: str) -> None:
        self._configmaps = configmaps.view()
        self._global = global_name
        self._kept: dict[tuple[str, str | None, str | None, str | None], BenchmarkResults] = {}

    def changed(self, change: Change) -> None:
        """The informer's change event: every kept lookup may be stale."""
        self._kept.clear()

    async def results(self, pod: PodFacts, sink: Malformed) -> BenchmarkResults:
        """The global table and the deployment's tokensPerSecond; missing ones are empty."""
        key = (pod.namespace, pod.backend, pod.model, pod.deployment)
        kept = self._kept.get(key)
        if kept is None:
            if len(self._kept) >= RESULTS_KEPT:
                self._kept.clear()
            kept = self._kept[key] = self._read(pod, sink)
        return kept

    def _read(self, pod: PodFacts, sink: Malformed) -> BenchmarkResults:
        data: ConfigMapData = {}
        if pod.backend and pod.model:
            data = self._configmaps.get(f"{pod.namespace}/{self._global}") or {}
        tps = None
        if pod.deployment:
            name = deployment_configmap(pod.deployment)
            tps = number(self._configmaps.get(f"{pod.namespace}/{name}") or {}, TPS_KEY, sink)
        return BenchmarkResults(data, tps, sink)


class KubeTenantPods:
    """The pods of a namespace, from the pod informer (pods that do not parse are left out)."""

    def __init__(self, pods: Informer[PodFacts | None]) -> None:
        self._pods = pods.view()

    async def pods(self, namespace: str) -> Sequence[PodFacts]:
        """Every pod of ``namespace`` as facts."""
        return [p for p in self._pods.values() if p is not None and p.namespace == namespace]


class KubeSources:
    """The informers a decision reads, run together until cancelled."""

    _nodes: InformerNodes
    """The node columns, kept by the node informer's changes."""
    _benchmarks: KubeBenchmarks
    """The TPS lookups, dropped on the ConfigMap informer's changes."""

    def __init__(
        self, client: KubeClient, sink: Malformed, *, global_configmap: str, pods: bool
    ) -> None:
        def node(obj: Obj) -> NodeFacts:
            meta = obj.get("metadata") or {}
            labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
            return node_facts(meta.get("name", ""), labels, annotations, sink)

        def pod(obj: Obj) -> PodFacts | None:
            try:
                return parse_pod(obj, sink)
            except BadExtenderArgsError:
                return None

        def results(obj: Obj) -> bool:
            name = str((obj.get("metadata") or {}).get("name", ""))
            return name == global_configmap or name.endswith(DEPLOYMENT_RESULTS_SUFFIX)

        self.nodes = Informer(
            CoreListWatch(client, "nodes"),
            lambda change: self._nodes.changed(change),
            decode=node,
            key=object_name,
        )
        self.configmaps = Informer(
            CoreListWatch(client, "configmaps", keep=results),
            lambda change: self._benchmarks.changed(change),
            decode=_configmap_data,
        )
        self.pods = Informer(CoreListWatch(client, "pods"), decode=pod) if pods else None
        self._nodes = InformerNodes(self.nodes)
        self._benchmarks = KubeBenchmarks(self.configmaps, global_configmap)
        self._client = client

    @classmethod
    def connect(
        cls,
        host: str | None,
        kubeconfig: str | None,
        sink: Malformed,
        *,
        global_configmap: str,
        pods: bool,
    ) -> KubeSources:
        """Informers on a client of ``host`` (else in-cluster config, else the kubeconfig)."""
        client = KubeClient(host=host, kubeconfig=kubeconfig)
        return cls(client, sink, global_configmap=global_configmap, pods=pods)

    async def close(self) -> None:
        """Close the client's connections (after ``run`` was cancelled)."""
        await self._client.close()

    def _informers(self) -> list[Informer[Any]]:
        found: list[Informer[Any]] = [self.nodes, self.configmaps]
        return found if self.pods is None else [*found, self.pods]

    def synced(self) -> bool:
        """Whether every informer has listed once."""
        return all(informer.synced.is_set() for informer in self._informers())

    async def wait_synced(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for every informer's first list; whether they all did."""
        with anyio.move_on_after(timeout_s):
            for informer in self._informers():
                await informer.synced.wait()
        return self.synced()

    async def run(self) -> None:
        """Run every informer until cancelled."""
        async with anyio.create_task_group() as tasks:
            for informer in self._informers():
                tasks.start_soon(informer.run)

    def node_lookup(self) -> InformerNodes:
        """Node names resolved through the node informer."""
        return self._nodes

    def benchmarks(self) -> KubeBenchmarks:
        """Benchmark results from the ConfigMap informer."""
        return self._benchmarks

    def tenants(self) -> KubeTenantPods | None:
        """Tenant pods from the pod informer; None when fair share is off (nothing watched)."""
        return None if self.pods is None else KubeTenantPods(self.pods)


def _configmap_data(obj: Obj) -> ConfigMapData:
    return dict(obj.get("data") or {})
