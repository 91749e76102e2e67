"""Releasing a deleted Model on Kubernetes: what its reconciles made, and its tmpfs copies.

The Deployment, Service, Jobs, ConfigMaps (the backend's, the trace's) and PDB made for
the Model are deleted explicitly rather than left to the garbage collector, so a Model's
deletion completes only once they are gone. A copy in a node's own /dev/shm (the flash
loader with cache strategy Memory) outlives the pods: a cleanup Job goes to every node the
Model's pods were seen on (what its ``flexinfer.ai/flash-nodes`` annotation records,
``flashnodes``), keeping the copies of the Models still declared.
"""

from __future__ import annotations

from flexinfer_common.errors import FlexInferError, NotFoundError
from flexinfer_controller.adapters.kube.store import KubernetesModelStore
from flexinfer_controller.backends import BackendRegistry
from flexinfer_controller.runtime.kubernetes import plan
from flexinfer_controller.runtime.kubernetes.apply import Applier
from flexinfer_controller.runtime.kubernetes.flashnodes import FlashNodes
from flexinfer_controller.runtime.kubernetes.names import deployment_ref, object_name, split_key
from flexinfer_controller.runtime.kubernetes.objects import render_cleanup, render_model
from flexinfer_controller.runtime.kubernetes.options import RenderOptions
from flexinfer_controller.runtime.kubernetes.trace import trace_config_map


class Release:
    """Deletes what was made for a Model, and runs its node tmpfs cleanup Jobs."""

    def __init__(
        self,
        models: KubernetesModelStore,
        applier: Applier,
        backends: BackendRegistry,
        options: RenderOptions,
        namespaces: list[str | None],
        flash_nodes: FlashNodes,
    ) -> None:
        self._models = models
        self._applier = applier
        self._backends = backends
        self._options = options
        self._namespaces = namespaces
        self._flash_nodes = flash_nodes

    async def release(self, model: str) -> bool:
        """Delete what was made for ``model``; False when the Model is gone already."""
        namespace, name = split_key(model)
        try:
            found = await self._models.get_model(namespace, name)
        except NotFoundError:
            return False  # gone without our finalizer: its owner references let the GC clean up
        # Its pods are gone by now (the teardown stopped them first): where they ran is
        # what was recorded on the Model while they did.
        nodes = self._flash_nodes.nodes(found)
        keep = await self._declared(model) if nodes else []
        try:
            objects = render_model(found, self._backends, self._options)
            deployment = next(o for o in objects if o["kind"] == "Deployment")
            objects.append(trace_config_map(found, deployment, None))
            on_delete = render_cleanup(found, self._backends, self._options, nodes, keep)
        except FlexInferError:  # it never rendered, so only a name can have been created
            objects = [deployment_ref(namespace, object_name(name))]
            on_delete = []
        await self._applier.delete_all(plan.cleanup(objects, on_delete))
        self._flash_nodes.forget(model)
        return True

    async def _declared(self, deleted: str) -> list[str]:
        """The Models still declared but ``deleted``: a node tmpfs cleanup keeps their copies."""
        # The node's /dev/shm holds the copies of every Model swapping on it; a cleanup
        # keeping none would make each of them copy its weights again at its next start.
        found: list[str] = []
        for namespace in self._namespaces:
            found += [
                m.key
                for m in await self._models.list_models(namespace)
                if m.key != deleted and m.metadata.deletion_timestamp is None
            ]
        return sorted(set(found))
