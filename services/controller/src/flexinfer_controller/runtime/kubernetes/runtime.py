"""``KubernetesRuntime``: a replica of a Model is a pod of the Model's Deployment.

* ``start`` ensures the Model's objects (rendered, planned, selectively merged) and raises
  the Deployment's replicas by one; the ReplicaSet makes the pod.
* ``stop`` gives the pod the lowest ``pod-deletion-cost``, so the ReplicaSet removes that
  one, and lowers the replicas by one.
* ``list`` comes from a watch of the engine pods (and placeholders, see ``replicas``): a
  pod is READY when its Ready condition is True, at ``http://<podIP>:<port>``.
* ``ready`` and ``exited`` events come from pod changes; a container restart or a
  CrashLoopBackOff is an unexpected exit, a deleted pod an expected one.
* ``ensure`` (every reconcile) keeps the Model's objects converged between starts: the
  Service always, and once detectGPU placed the Model the rest, its Deployment created at
  0 replicas; it never changes the replicas, and leaves the template of a Deployment that
  runs pods to ``start`` (see ``plan.standby``). A Model that is not placed gets no
  Deployment, so nothing can start a pod of it.
* ``model_cache`` is the cache gate (``gate.JobGate``): ``ensure`` hands it the prefetch and
  quantize Jobs it read, and the planner starts nothing until they succeeded.
* ``prune`` deletes the Model's Failed pods (evicted, OOM-killed): the ReplicaSet has
  replaced them, and Kubernetes would keep them until thousands piled up.
* ``sleep`` and ``wake`` (``sleeping``): a ready pod's engine is put to sleep where that
  frees its GPU for another pod (a time-sliced or MPS-shared node, or no device-plugin GPU),
  and the pod is annotated ``flexinfer.ai/sleeping``: it leaves ``list`` (and so the
  proxies) and shows in ``sleepers``; a wake makes it READY again once its pod is Ready.
* ``adopt`` lists the pods a previous controller left and reads their Deployments.
* ``release`` deletes what the Model's reconciles created, and a node-tmpfs copy's
  cleanup Jobs (``release.Release``); the nodes come from the pods seen (``flashnodes``).

Their errors are mapped at this boundary (``errors``): an object the apiserver refuses as
written is a PermanentError, a conflict, throttling or an apiserver away a TemporaryError.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import logging
import time
from dataclasses import replace

from flexinfer_common.api import Model
from flexinfer_common.api.status import GPUStatus
from flexinfer_common.errors import ConflictError, FlexInferError, InvalidSpecError, NotFoundError
from flexinfer_common.kube.client import KubeClient, Obj
from flexinfer_common.kube.informer import Change, Informer
from flexinfer_controller.adapters.kube.objects import CustomObjects
from flexinfer_controller.adapters.kube.pods import PodListWatch, delete_pod, patch_pod
from flexinfer_controller.adapters.kube.resources import MODELS
from flexinfer_controller.adapters.kube.store import KubernetesModelStore
from flexinfer_controller.adapters.kube.workloads import Workloads
from flexinfer_controller.backends import (
    BackendRegistry,
    LaunchSpec,
    UnsupportedBackendError,
)
from flexinfer_controller.core.cache import ModelCache, Notify
from flexinfer_controller.core.gpu import GPUInventory
from flexinfer_controller.runtime.base import Replica, ReplicaEvent, ReplicaListener
from flexinfer_controller.runtime.kubernetes import plan
from flexinfer_controller.runtime.kubernetes.apply import Applier
from flexinfer_controller.runtime.kubernetes.errors import cluster_call
from flexinfer_controller.runtime.kubernetes.flashnodes import FlashNodes
from flexinfer_controller.runtime.kubernetes.gate import JobGate, gated
from flexinfer_controller.runtime.kubernetes.inventory import NodeInventory
from flexinfer_controller.runtime.kubernetes.names import deployment_ref, object_name, split_key
from flexinfer_controller.runtime.kubernetes.objects import render_model, render_service
from flexinfer_controller.runtime.kubernetes.options import GPUPlacement, RenderOptions
from flexinfer_controller.runtime.kubernetes.pods import (
    DELETION_COST_ANNOTATION,
    ENGINE_SELECTOR,
    FIRST_TO_GO,
    PodView,
    stamp,
    view,
)
from flexinfer_controller.runtime.kubernetes.release import Release
from flexinfer_controller.runtime.kubernetes.replicas import (
    Wanted,
    as_replica,
    placeholder_model,
    replicas_of,
    wanted_of,
)
from flexinfer_controller.runtime.kubernetes.retry import RetryPolicy, with_attempt
from flexinfer_controller.runtime.kubernetes.sleepers import PodSleepers
from flexinfer_controller.runtime.kubernetes.sleeping import PodSleep
from flexinfer_controller.runtime.kubernetes.trace import trace_config_map

log = logging.getLogger(__name__)


class KubernetesRuntime(PodSleepers):
    """Engine replicas as pods of one Deployment per Model."""

    name = "kubernetes"

    def __init__(
        self,
        *,
        client: KubeClient,
        listener: ReplicaListener,
        backends: BackendRegistry,
        options: RenderOptions,
        namespaces: list[str | None],
        watch_timeout_s: int = 300,
        job_poll_s: float = 5.0,
        job_retry: RetryPolicy | None = None,
    ) -> None:
        self._client = client
        self._listener = listener
        self._backends = backends
        self._options = options
        self._models = KubernetesModelStore(client)
        self._applier = Applier(Workloads(client))
        self._informers = [
            self._pod_informer(namespace, watch_timeout_s) for namespace in namespaces
        ]
        self._nodes = NodeInventory(client, watch_timeout_s)
        self._tasks: list[asyncio.Task[None]] = []
        self._pods: dict[str, PodView] = {}
        self._flash_nodes = FlashNodes(CustomObjects(client, MODELS))
        self._release = Release(
            self._models, self._applier, backends, options, namespaces, self._flash_nodes
        )
        self._wanted: dict[str, Wanted] = {}
        self._stopping: set[str] = set()
        self._gone: dict[str, asyncio.Event] = {}
        self._ready_at: dict[str, float] = {}
        self._sleep = PodSleep(client)
        self._gate = JobGate(job_poll_s, lambda model: bool(self._live(model)), job_retry)

    def _pod_informer(self, namespace: str | None, watch_timeout_s: int) -> Informer[Obj]:
        holder: list[Informer[Obj]] = []
        informer = Informer(
            PodListWatch(self._client, ENGINE_SELECTOR),
            lambda change: self._on_pod(holder[0], change),
            namespace=namespace,
            watch_timeout_s=watch_timeout_s,
        )
        holder.append(informer)
        return informer

    # -- the Runtime interface ---------------------------------------------------------

    async def adopt(self) -> list[Replica]:
        """Watch the engine pods; read the Deployments of the Models they serve."""
        for informer in self._informers:
            self._tasks.append(asyncio.create_task(informer.run(), name="watch-pods"))
        self._tasks.append(asyncio.create_task(self._nodes.informer.run(), name="watch-nodes"))
        self._tasks.append(asyncio.create_task(self._flash_nodes.run(), name="flash-nodes"))
        # The nodes too: a reconcile before their first list would see no fleet at all.
        await asyncio.gather(*(i.synced.wait() for i in [*self._informers, self._nodes.informer]))
        for model in sorted({p.model for p in self._pods.values()}):
            await self._read_wanted(model)
        adopted = [r for r in self.list() if r.url is not None]
        for replica in adopted:
            log.info("adopted pod %s of %s at %s", replica.id, replica.model, replica.url)
        return adopted

    @cluster_call("starting a replica")
    async def start(self, model: str, generation: int, spec: LaunchSpec) -> Replica:
        """Ensure the Model's objects; one more replica on its Deployment."""
        namespace, name = split_key(model)
        found = await self._models.get_model(namespace, name)
        options = replace(self._options, gpu=GPUPlacement(spec.gpu_vendor, spec.gpu_arch))
        objects = render_model(found, self._backends, options)
        deployment = next(o for o in objects if o["kind"] == "Deployment")
        digest = stamp(deployment, model, generation)
        # Written before the replicas rise, so the pod they make reads this start's parent.
        objects.insert(0, trace_config_map(found, deployment, spec.trace_parent))
        wanted = self._wanted.get(model) or await self._read_wanted(model)
        if wanted is not None and wanted.template_hash == digest:
            # Same pods, new generation (serverless settings, say): its pods now serve it.
            renewed = wanted.generation != generation and wanted.replicas > 0
            target = wanted.replicas if renewed else wanted.replicas + 1
        else:  # a new template: its replicas start from the pods already made from it
            target = 1 + sum(p.template_hash == digest for p in self._live(model))
        deployment["spec"]["replicas"] = target
        # Known before the writes: the new pod's events may come before they all return.
        self._wanted[model] = Wanted(
            namespace, deployment["metadata"]["name"], generation, digest, target
        )
        try:
            for obj in objects:
                await self._applier.ensure(obj)
        except FlexInferError:
            del self._wanted[model]  # written or not: read it anew next time
            raise
        log.info("scaled %s to %d replica(s) (generation %d)", model, target, generation)
        return replicas_of(model, [], self._wanted[model], {})[-1]

    @cluster_call("stopping a replica")
    async def stop(self, replica_id: str) -> None:
        """Mark the pod to go first and lower the replicas; a placeholder just lowers them."""
        model = placeholder_model(replica_id)
        if model is not None:
            await self._scale_down(model)
            return
        pod = self._pods.get(replica_id)
        if pod is None or replica_id in self._stopping:
            return
        wanted = self._wanted.get(pod.model)
        if wanted is not None and pod.template_hash == wanted.template_hash:
            patch = {"metadata": {"annotations": {DELETION_COST_ANNOTATION: FIRST_TO_GO}}}
            with contextlib.suppress(NotFoundError):
                await patch_pod(self._client, pod.namespace, pod.name, patch)
            await self._scale_down(pod.model)
        # else: a leftover of a rollout, which the Deployment controller removes itself
        self._stopping.add(replica_id)

    @cluster_call("ensuring the Model's objects")
    async def ensure(self, model: Model, gpu: GPUStatus | None) -> None:
        """ensureService; once placed, the other objects and the Deployment (plan.standby)."""
        self._flash_nodes.check(model)
        try:
            objects = self._standby_objects(model, gpu)
        except (InvalidSpecError, UnsupportedBackendError):
            return  # the plan's verdict already tells why it cannot run
        jobs: builtins.list[Obj] = []
        for obj in objects:
            if obj["kind"] != "Deployment":
                live = await self._applier.ensure(obj)
                jobs += [await self._rerun_if_due(model, obj, live)] if gated(obj) else []
                continue
            try:
                live = await self._applier.ensure(obj, plan.standby)
            except FlexInferError:
                self._wanted.pop(model.key, None)  # written or not: read it anew next time
                raise
            self._wanted[model.key] = wanted_of(live)
        if gpu is not None:  # the Jobs are rendered only once placed
            self._gate.record(model, jobs)

    async def _rerun_if_due(self, model: Model, job: Obj, live: Obj) -> Obj:
        """The failed Job deleted and created afresh once the gate says it is due; else live."""
        attempt = self._gate.retry_due(model, live)
        if attempt is None:
            return live
        log.info("re-running failed Job %s of %s (attempt %d)", job["metadata"]["name"],
                 model.key, attempt)  # fmt: skip
        await self._applier.delete_all([plan.delete(job)])
        return await self._applier.ensure(with_attempt(job, attempt))

    def model_cache(self, notify: Notify) -> ModelCache:
        """The cache gate: the Model's prefetch and quantize Jobs, as ``ensure`` reads them."""
        return self._gate.bind(notify)

    def _standby_objects(self, model: Model, gpu: GPUStatus | None) -> builtins.list[Obj]:
        """What ``ensure`` converges: the Service alone until detectGPU placed the Model."""
        if gpu is None:
            return [render_service(model, self._backends, self._options)]
        options = replace(self._options, gpu=GPUPlacement(gpu.vendor, gpu.architecture))
        objects = render_model(model, self._backends, options)
        deployment = next(o for o in objects if o["kind"] == "Deployment")
        stamp(deployment, model.key, model.metadata.generation or 1)
        return objects

    @cluster_call("pruning failed pods")
    async def prune(self, model: str) -> builtins.list[str]:
        """Delete the Model's pods in phase Failed; the keys of those deleted."""
        # A Failed phase is final: no pod in it ever serves again.
        failed = [p for p in self._pods.values() if p.model == model and p.failed]
        pruned: builtins.list[str] = []
        for pod in (p for p in failed if not p.deleting):
            # Gone already, or the name holds a new pod: nothing of this one to delete.
            with contextlib.suppress(NotFoundError, ConflictError):
                await delete_pod(self._client, pod.namespace, pod.name, pod.uid)
                log.info("pruned failed pod %s of %s (%s)", pod.key, model, pod.crash)
                pruned.append(pod.key)
        return pruned

    async def wait_stopped(self, replica_id: str, timeout_s: float) -> bool:
        """Wait until the pod is gone from the watch."""
        if replica_id not in self._pods:
            return True
        gone = self._gone.setdefault(replica_id, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(gone.wait(), timeout_s)
        return replica_id not in self._pods

    def list(self, model: str | None = None) -> list[Replica]:
        """Live pods (not stopping, deleted or failed) and placeholders, of one model or all."""
        models = (
            {model}
            if model is not None
            else {*self._wanted, *(p.model for p in self._pods.values())}
        )
        out: list[Replica] = []
        for key in sorted(models):
            wanted, asleep = self._wanted.get(key), self._asleep(key)
            out += replicas_of(key, self._live(key), wanted, self._ready_at, asleep)
        return out

    @cluster_call("deleting the Model's objects")
    async def release(self, model: str) -> None:
        """Delete the Deployment, Service, Jobs, ConfigMap and PDB made for the Model."""
        if await self._release.release(model):
            self._wanted.pop(model, None)

    def gpu_inventory(self) -> GPUInventory:
        """The GPU nodes as their labels say, watched from ``adopt`` on."""
        return self._nodes

    async def close(self, *, stop_replicas: bool) -> None:
        """Stop watching; scale every Deployment to zero too when ``stop_replicas``."""
        if stop_replicas:
            for wanted in list(self._wanted.values()):
                if not wanted.replicas:
                    continue  # an idle Model's Deployment, at 0 already
                ref = deployment_ref(wanted.namespace, wanted.deployment)
                with contextlib.suppress(FlexInferError):
                    await self._applier.scale(ref, 0)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self._client.close()

    # -- state -------------------------------------------------------------------------

    async def _read_wanted(self, model: str) -> Wanted | None:
        namespace, name = split_key(model)
        try:
            live = await self._applier.run(plan.read(deployment_ref(namespace, object_name(name))))
        except NotFoundError:
            return None
        wanted = self._wanted[model] = wanted_of(live)
        return wanted

    async def _scale_down(self, model: str) -> None:
        wanted = self._wanted.get(model)
        if wanted is None or wanted.replicas == 0:
            return
        ref = deployment_ref(wanted.namespace, wanted.deployment)
        try:
            await self._applier.scale(ref, wanted.replicas - 1)
        except FlexInferError:
            del self._wanted[model]  # it may or may not have been written: read it anew
            raise
        self._wanted[model] = dataclasses.replace(wanted, replicas=wanted.replicas - 1)

    # -- pod events --------------------------------------------------------------------

    def _on_pod(self, informer: Informer[Obj], change: Change) -> None:
        old = self._pods.get(change.key)
        found = informer.get(change.key) if change.type != "DELETED" else None
        new = view(found) if found is not None else None
        if new is None:
            if old is not None:
                self._pod_gone(old)
            return
        self._pods[new.key] = new
        self._sleep.seen(new)
        if new.node and new.node_tmpfs:
            self._flash_nodes.saw(new.model, new.node)
        wanted = self._wanted.get(new.model)
        became = new.ready and new.url and not (old is not None and old.ready and old.url)
        if became and not self._sleep.asleep(new):
            self._ready_at[new.key] = time.time()
            woke = self._sleep.waking.pop(new.key, None)
            took = time.monotonic() - woke if woke is not None else None
            replica = as_replica(new, wanted, self._ready_at[new.key])
            self._listener(ReplicaEvent("ready", replica, took_s=took))
        crashes = new.restarts - old.restarts if old is not None else 0
        if new.crash_looping and not (old is not None and old.crash_looping):
            crashes = max(crashes, 1)
        replica = as_replica(new, wanted, None)
        for _ in range(max(crashes, 0)):
            message = new.crash or f"pod {new.name}: engine container restarted"
            self._listener(ReplicaEvent("exited", replica, expected=False, message=message))

    def _pod_gone(self, pod: PodView) -> None:
        self._pods.pop(pod.key, None)
        self._ready_at.pop(pod.key, None)
        self._sleep.forget(pod.key)
        self._stopping.discard(pod.key)
        self._gone.pop(pod.key, asyncio.Event()).set()
        replica = as_replica(pod, self._wanted.get(pod.model), None)
        # The Deployment replaces a pod deleted under it (eviction, preemption): no crash.
        self._listener(ReplicaEvent("exited", replica, message=f"pod {pod.name} deleted"))
