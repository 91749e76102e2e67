"""The apiserver side: a node informer feeding the node cache, benchmark ConfigMaps, pods.

A small client of its own (services never import each other; the controller has a larger
one): the official ``kubernetes`` client, blocking calls in worker threads. Nodes are
listed, then watched from the list's resourceVersion; a broken or expired watch lists
again. ConfigMaps and pods are read per decision (one or two GETs, never per node).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

import anyio
import anyio.to_thread
from kubernetes import client as kube_client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.watch.watch import iter_resp_lines

from flexinfer_common.errors import ConfigError
from flexinfer_common.placement import (
    BenchmarkResults,
    Malformed,
    PodFacts,
    node_facts,
)
from flexinfer_common.placement.facts import number
from flexinfer_common.placement.tps import GLOBAL_RESULTS_CONFIGMAP, TPS_KEY, deployment_configmap
from flexinfer_scheduler.core.nodes import NodeCache
from flexinfer_scheduler.core.protocol import BadExtenderArgsError, parse_pod

log = logging.getLogger(__name__)
T = TypeVar("T")
Obj = dict[str, Any]
REQUEST_TIMEOUT = (5.0, 30.0)
WATCH_TIMEOUT_S = 300
RETRY_S = 1.0


def kube_api(host: str | None = None, kubeconfig: str | None = None) -> Any:
    """A CoreV1Api: ``host`` if given (tests), else in-cluster, else the kubeconfig."""
    if host is not None:
        config = kube_client.Configuration(host=host)
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
    config.retries = 1
    return kube_client.CoreV1Api(kube_client.ApiClient(config))


async def _json(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A call's decoded JSON body, in a worker thread (raw: no typed model conversion)."""

    def run() -> Any:
        response = fn(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
        try:
            return json.loads(response.data)
        finally:
            response.release_conn()

    return await anyio.to_thread.run_sync(run)


class NodeInformer:
    """Lists and watches every Node into a ``NodeCache`` until cancelled."""

    def __init__(self, api: Any, cache: NodeCache, sink: Malformed) -> None:
        self._api = api
        self._cache = cache
        self._sink = sink
        self.synced = anyio.Event()
        self._response: Any = None
        self._stop = threading.Event()

    def _facts(self, obj: Mapping[str, Any]) -> Any:
        meta = obj.get("metadata") or {}
        return node_facts(
            meta.get("name", ""),
            meta.get("labels") or {},
            meta.get("annotations") or {},
            self._sink,
        )

    async def run(self) -> None:
        """List, then watch; relist after any failure. Cancel to stop."""
        try:
            while True:
                try:
                    body = await _json(self._api.list_node)
                    self._cache.replace(self._facts(item) for item in body.get("items") or [])
                    self.synced.set()
                    await anyio.to_thread.run_sync(
                        self._watch,
                        str(body["metadata"]["resourceVersion"]),
                        abandon_on_cancel=True,
                    )
                except (ApiException, OSError, ValueError, KeyError) as exc:
                    log.warning("node informer: %s; listing again in %.0fs", exc, RETRY_S)
                    await anyio.sleep(RETRY_S)
        finally:
            self._stop.set()
            if self._response is not None:
                self._response.shutdown()

    def _watch(self, resource_version: str) -> None:
        """Apply watch events until the stream ends (then the caller lists again)."""
        response = self._api.list_node(
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_TIMEOUT_S,
            _preload_content=False,
            _request_timeout=(REQUEST_TIMEOUT[0], WATCH_TIMEOUT_S + 30),
        )
        self._response = response
        try:
            for line in iter_resp_lines(response):
                if self._stop.is_set() or not line:
                    continue
                event = json.loads(line)
                if not self._apply(event):
                    return
        finally:
            response.release_conn()

    def _apply(self, event: Mapping[str, Any]) -> bool:
        """One watch event; False when the watch must be restarted (410, an error)."""
        kind, obj = event.get("type"), event.get("object") or {}
        if kind in ("ADDED", "MODIFIED"):
            self._cache.upsert(self._facts(obj))
        elif kind == "DELETED":
            self._cache.remove((obj.get("metadata") or {}).get("name", ""))
        return kind != "ERROR"


async def _get(api: Any, namespace: str, name: str) -> Mapping[str, str] | None:
    try:
        body = await _json(api.read_namespaced_config_map, name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return cast(Mapping[str, str], body.get("data") or {})


class KubeBenchmarks:
    """The benchmark ConfigMaps in the pod's namespace, read per decision."""

    def __init__(self, api: Any, global_name: str = GLOBAL_RESULTS_CONFIGMAP) -> None:
        self._api = api
        self._global = global_name

    async def results(self, pod: PodFacts, sink: Malformed) -> BenchmarkResults:
        """The global table and the deployment's tokensPerSecond; missing ones are empty."""
        data: Mapping[str, str] = {}
        if pod.backend and pod.model:
            data = await _get(self._api, pod.namespace, self._global) or {}
        tps = None
        if pod.deployment:
            deployment = await _get(self._api, pod.namespace, deployment_configmap(pod.deployment))
            tps = number(deployment or {}, TPS_KEY, sink)
        return BenchmarkResults(data, tps, sink)


class KubeTenantPods:
    """The pods of a namespace, listed per decision (only with fair share on)."""

    def __init__(self, api: Any, sink: Malformed) -> None:
        self._api = api
        self._sink = sink

    async def pods(self, namespace: str) -> Sequence[PodFacts]:
        """Every pod of ``namespace`` as facts (ones that do not parse are skipped)."""
        body = await _json(self._api.list_namespaced_pod, namespace)
        out = []
        for item in body.get("items") or []:
            try:
                facts = parse_pod(item, self._sink)
            except BadExtenderArgsError:
                continue
            out.append(facts)
        return out
