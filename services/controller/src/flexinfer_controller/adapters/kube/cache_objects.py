"""The Jobs, PVCs, nodes and pods a legacy ModelCache's reconcile reads and writes, as dicts.

Jobs are not watched: a cache whose Job runs is looked at again every
``FLEXINFER_KUBERNETES_JOB_POLL_S``, which lists its Jobs by label (as the Model's cache
gate reads its Jobs). The nodes of a NodeLocal cache are listed by its nodeSelector at
each pass. A finished Job's pod is read for what its container reported (its termination
message: the bytes it fetched), and a grown ``storageSize`` raises the PVC's request. Every
call is on the official client's typed APIs (``core``, ``batch``), read as JSON, so the RBAC
test sees each one in this file; nothing here watches.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, cast

from flexinfer_common.errors import NotFoundError
from flexinfer_common.kube.client import MERGE_PATCH, KubeClient, Obj, list_json
from flexinfer_controller.legacy.modelcache.plan import CACHE_LABEL
from flexinfer_controller.runtime.kubernetes.names import label_value


async def _json(client: KubeClient, what: str, fn: Callable[..., Any], *args: Any) -> Obj:
    """``fn(*args)``'s answer as a dict (the typed models are skipped)."""

    def raw(*call_args: Any, **kwargs: Any) -> Any:
        response = fn(*call_args, _preload_content=False, **kwargs)
        try:
            return json.loads(response.data or b"{}")
        finally:
            response.release_conn()

    return cast(Obj, await client.call(what, raw, *args))


class CacheObjects:
    """Jobs, PVCs and nodes on the apiserver, for the ModelCache reconcile."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    async def list_jobs(self, namespace: str, cache_name: str) -> list[Obj]:
        """The Jobs labelled for the cache."""
        selector = f"{CACHE_LABEL}={label_value(cache_name)}"
        lister = functools.partial(self._client.batch.list_namespaced_job, namespace,
                                   label_selector=selector)  # fmt: skip
        items, _ = await list_json(self._client, "list jobs", lister)
        return items

    async def nodes(self, selector: dict[str, str]) -> list[str]:
        """Names of the nodes carrying every label of ``selector``."""
        text = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        lister = functools.partial(self._client.core.list_node, label_selector=text)
        items, _ = await list_json(self._client, "list nodes", lister)
        return sorted(str(n["metadata"]["name"]) for n in items)

    async def termination_message(self, job: Obj, container: str) -> str | None:
        """What ``container`` wrote to its termination log in the Job's pod that succeeded
        (None: no such pod any more, or it wrote nothing)."""
        meta = job["metadata"]
        # The Job controller labels its pods job-name=<Job> (on every Kubernetes version);
        # the owner's uid tells them from a same-named Job's of before.
        lister = functools.partial(self._client.core.list_namespaced_pod, meta["namespace"],
                                   label_selector=f"job-name={meta['name']}")  # fmt: skip
        pods, _ = await list_json(self._client, "list pods", lister)
        for pod in pods:
            owners = pod["metadata"].get("ownerReferences") or []
            if not any(o.get("uid") == meta.get("uid") for o in owners):
                continue
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                done = (status.get("state") or {}).get("terminated") or {}
                if status.get("name") == container and done.get("exitCode") == 0:
                    return str(done.get("message") or "") or None
        return None

    async def resize_claim(self, claim: Obj, storage: str) -> None:
        """Raise the PVC's storage request (the apiserver refuses a shrink, and a claim
        whose StorageClass does not allow expansion: ApiRejectedError)."""
        meta, core = claim["metadata"], self._client.core
        body = {"spec": {"resources": {"requests": {"storage": storage}}}}
        call = functools.partial(core.patch_namespaced_persistent_volume_claim,
                                 _content_type=MERGE_PATCH)  # fmt: skip
        await _json(self._client, "patch PersistentVolumeClaim", call, meta["name"],
                    meta["namespace"], body)  # fmt: skip

    async def get(self, obj: Obj) -> Obj | None:
        """The live Job or PVC of ``obj``; None when absent."""
        meta, c = obj["metadata"], self._client
        fn = (c.batch.read_namespaced_job if obj["kind"] == "Job"
              else c.core.read_namespaced_persistent_volume_claim)  # fmt: skip
        try:
            return await _json(c, f"get {obj['kind']}", fn, meta["name"], meta["namespace"])
        except NotFoundError:
            return None

    async def create(self, obj: Obj) -> Obj:
        """Create the Job or PVC; ConflictError when the name is taken."""
        c, namespace = self._client, obj["metadata"]["namespace"]
        fn = (c.batch.create_namespaced_job if obj["kind"] == "Job"
              else c.core.create_namespaced_persistent_volume_claim)  # fmt: skip
        return await _json(c, f"create {obj['kind']}", fn, namespace, obj)

    async def delete(self, obj: Obj) -> None:
        """Delete the Job (its pods in the background) or the PVC; gone already is fine."""
        meta, c = obj["metadata"], self._client
        fn = (c.batch.delete_namespaced_job if obj["kind"] == "Job"
              else c.core.delete_namespaced_persistent_volume_claim)  # fmt: skip
        # A Job deleted without a policy orphans its pods: the download would go on.
        call = functools.partial(fn, propagation_policy="Background")
        try:
            await _json(c, f"delete {obj['kind']}", call, meta["name"], meta["namespace"])
        except NotFoundError:
            return
