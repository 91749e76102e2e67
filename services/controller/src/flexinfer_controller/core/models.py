"""Admin operations on Models: store writes, change events and reconcile triggers."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable

from flexinfer_common.api import Model
from flexinfer_common.api.operations import (
    PINNED_ANNOTATION,
    UNLOADED_AT_ANNOTATION,
    unload_refusal,
    unload_stamp,
)
from flexinfer_common.bus import EventBus, topics
from flexinfer_common.errors import BusError, ConflictError, NotFoundError
from flexinfer_common.store import EndpointRecord, ModelStore
from flexinfer_controller.core.controller import Controller
from flexinfer_controller.core.finalizer import MODEL_FINALIZER
from flexinfer_controller.runtime import LogRequest, Replica

log = logging.getLogger(__name__)

Annotate = Callable[[Model], dict[str, str]]
"""The annotations a Model should have (given the stored one); may raise to refuse."""


class UnloadRefusedError(ConflictError):
    """The Model's spec keeps replicas running, so an unload would undo itself (409)."""


class ModelService:
    """What the admin API does; knows nothing of HTTP."""

    def __init__(
        self, store: ModelStore, bus: EventBus, controller: Controller, *, delete_wait_s: float
    ) -> None:
        self._store = store
        self._bus = bus
        self._controller = controller
        self._delete_wait_s = delete_wait_s

    async def create(self, model: Model) -> Model:
        """Insert a new Model; ConflictError if it exists."""
        model.metadata.resource_version = None
        stored = await self._store.create_model(model)
        await self._changed(stored)
        return stored

    async def apply(self, model: Model) -> tuple[Model, bool]:
        """Create or replace; (stored model, created)."""
        meta = model.metadata
        for _ in range(3):
            try:
                current = await self._store.get_model(meta.namespace, meta.name)
            except NotFoundError:
                if meta.resource_version is not None:
                    raise ConflictError(
                        f"model {model.key} does not exist, but resourceVersion "
                        f"{meta.resource_version!r} was given"
                    ) from None
                try:
                    stored = await self._store.create_model(model)
                except ConflictError:
                    continue  # created concurrently: replace it instead
                await self._changed(stored)
                return stored, True
            stored = await self._store.replace_model(_keep_finalizer(model, current))
            await self._changed(stored)
            return stored, False
        raise ConflictError(f"model {model.key} is being changed concurrently; retry")

    async def get(self, namespace: str, name: str) -> Model:
        """The stored Model, or NotFoundError."""
        return await self._store.get_model(namespace, name)

    async def list_namespace(self, namespace: str | None) -> list[Model]:
        """Models of one namespace (all namespaces when None)."""
        return await self._store.list_models(namespace)

    async def delete(self, namespace: str, name: str) -> None:
        """Delete the Model and wait (briefly) until its engines are being stopped.

        The store only stamps the deletion while the cleanup finalizer holds the Model; the
        reconcile this waits for tears its engines down and releases it.
        """
        await self._store.delete_model(namespace, name)
        key = f"{namespace}/{name}"
        await self._publish(topics.ModelChangedEvent(model=key, generation=0, deleted=True))
        await self._controller.sync(key, self._delete_wait_s)

    async def pin(self, namespace: str, name: str, pinned: bool) -> Model:
        """Set (``pinned``) or remove ``flexinfer.ai/pinned``: the arbiter never evicts a
        pinned Model."""

        def change(model: Model) -> dict[str, str]:
            annotations = dict(model.metadata.annotations)
            if pinned:
                annotations[PINNED_ANNOTATION] = "true"
            else:
                annotations.pop(PINNED_ANNOTATION, None)
            return annotations

        return await self._annotate(namespace, name, change)

    async def unload(self, namespace: str, name: str) -> Model:
        """Scale the Model to zero now (``flexinfer.ai/unloaded-at``) and wait (briefly)
        until the reconcile that stops its engines ran; UnloadRefusedError when its spec
        keeps replicas up regardless."""
        stamp = unload_stamp()  # this process's clock: the one activity is compared on

        def change(model: Model) -> dict[str, str]:
            refusal = unload_refusal(model.spec)
            if refusal is not None:
                raise UnloadRefusedError(
                    f"model {model.key} cannot be unloaded: {refusal}; let it scale to "
                    f"zero first (flexinfer scale model {model.metadata.name} --replicas 0)"
                )
            return {**model.metadata.annotations, UNLOADED_AT_ANNOTATION: stamp}

        stored = await self._annotate(namespace, name, change)
        await self._stopped(stored.key)
        return await self._store.get_model(namespace, name)

    async def _stopped(self, key: str) -> None:
        """Reconcile ``key`` (which stops its engines), wait for them to exit, as llama-swap's
        /unload does, then reconcile again so that its status says Stopped."""
        runtime, deadline = self._controller.runtime, time.monotonic() + self._delete_wait_s
        running = runtime.list(key)
        await self._controller.sync(key, self._delete_wait_s)
        for replica in running:
            await runtime.wait_stopped(replica.id, max(0.0, deadline - time.monotonic()))
        await self._controller.sync(key, max(0.0, deadline - time.monotonic()))

    async def _annotate(
        self, namespace: str, name: str, change: Annotate, attempts: int = 5
    ) -> Model:
        """Replace the Model's annotations with ``change(model)``, conditional on the
        version read; read again when the controller's status write came in between."""
        for _ in range(attempts):
            current = await self._store.get_model(namespace, name)
            annotations = change(current)
            if annotations == current.metadata.annotations:
                return current
            updated = current.model_copy(deep=True)
            updated.metadata.annotations = annotations
            try:
                stored = await self._store.replace_model(updated)
            except ConflictError:
                continue
            await self._changed(stored)
            return stored
        raise ConflictError(f"model {namespace}/{name} is being changed concurrently; retry")

    async def endpoints(self, model: str | None = None) -> list[EndpointRecord]:
        """The store's endpoint records (for debugging)."""
        return await self._store.list_endpoints(model)

    async def logs(
        self, namespace: str, name: str, replica: str | None, request: LogRequest
    ) -> tuple[Replica, AsyncIterator[bytes]]:
        """One replica's captured output: the named one, else the newest (NotFoundError)."""
        await self._store.get_model(namespace, name)
        key = f"{namespace}/{name}"
        replicas = self._controller.runtime.log_replicas(key)
        if replica is not None:
            replicas = [r for r in replicas if r.id == replica]
            if not replicas:
                raise NotFoundError(f"model {key} has no replica {replica!r}")
        if not replicas:
            raise NotFoundError(
                f"model {key} has no replica to show logs of (none ran since the controller "
                "started)"
            )
        chosen = replicas[0]
        return chosen, self._controller.runtime.logs(chosen, request)

    async def _changed(self, model: Model) -> None:
        event = topics.ModelChangedEvent(model=model.key, generation=model.metadata.generation or 0)
        await self._publish(event)
        self._controller.enqueue(model.key)

    async def _publish(self, event: topics.ModelChangedEvent) -> None:
        try:
            await self._bus.publish(topics.MODELS, event.model_dump(mode="json"))
        except BusError as exc:
            # The store is the source of truth and the periodic resync catches up.
            log.warning("could not publish %s change: %s", event.model, exc)


def _keep_finalizer(model: Model, current: Model) -> Model:
    """A client's document keeps the controller's finalizer: it is not the client's to drop."""
    held = MODEL_FINALIZER in current.metadata.finalizers
    if held and MODEL_FINALIZER not in model.metadata.finalizers:
        model = model.model_copy(deep=True)
        model.metadata.finalizers.append(MODEL_FINALIZER)
    return model
