"""Where a Model's node-tmpfs copies are: its ``flexinfer.ai/flash-nodes`` annotation.

A Model with the flash loader and cache strategy Memory copies its weights into the
node's own /dev/shm, which outlives its pods; on deletion one cleanup Job per such node
removes the copy. The nodes are written onto the Model itself as its pods are seen on
them (merged with what the annotation holds, bounded), so a controller restarted between
the pods and the deletion still knows every node.

Pod events come from an informer callback, which cannot wait on the apiserver: ``saw``
notes a node and ``run`` writes it. ``nodes`` (on deletion) adds the nodes still pending
to what the annotation says, so a deletion right after a pod's start misses none either.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable, Sequence

from flexinfer_common.api import Model
from flexinfer_common.errors import ConflictError, FlexInferError, NotFoundError, TemporaryError
from flexinfer_common.kube.client import Obj
from flexinfer_controller.adapters.kube.objects import CustomObjects, JsonPatch, version_guard
from flexinfer_controller.runtime.kubernetes.names import FLASH_NODES_ANNOTATION

log = logging.getLogger(__name__)

MAX_NODES = 128
"""The annotation's bound: a node name has up to 253 characters, a Model's annotations
256 KiB in all. Past it the oldest nodes are dropped (their copies are then left)."""
ATTEMPTS = 8
RETRY_S = 2.0
_NODE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def parse(value: str | None) -> list[str]:
    """The node names of an annotation value, in order; anything not a node name is skipped."""
    out: list[str] = []
    for item in (value or "").split(","):
        node = item.strip()
        # Hand-edited, perhaps: a name that is none would become a Job's nodeName.
        if node and len(node) <= 253 and _NODE.match(node) and node not in out:
            out.append(node)
    return out


def merge(recorded: Sequence[str], seen: Iterable[str], limit: int = MAX_NODES) -> list[str]:
    """``recorded``, then the ``seen`` nodes it lacks; past ``limit`` the oldest go."""
    out = list(recorded)
    out += [node for node in sorted(set(seen)) if node not in out]
    if len(out) > limit:
        log.warning("flash nodes past %d: forgetting %s", limit, ", ".join(out[:-limit]))
    return out[-limit:]


def recorded(model: Model) -> list[str]:
    """The nodes the Model's annotation names."""
    return parse(model.metadata.annotations.get(FLASH_NODES_ANNOTATION))


def _write_op(annotations: Obj | None, nodes: list[str]) -> JsonPatch:
    value = ",".join(nodes)
    if annotations is None:  # a JSON patch cannot add a key under a missing object
        return [
            {"op": "add", "path": "/metadata/annotations", "value": {FLASH_NODES_ANNOTATION: value}}
        ]
    key = FLASH_NODES_ANNOTATION.replace("~", "~0").replace("/", "~1")
    return [{"op": "add", "path": f"/metadata/annotations/{key}", "value": value}]


class FlashNodes:
    """By Model: the nodes of its node-tmpfs copies, written to its annotation."""

    def __init__(self, models: CustomObjects, retry_s: float = RETRY_S) -> None:
        self._models = models
        self._retry_s = retry_s
        self._pending: dict[str, set[str]] = {}
        """Seen, not written yet."""
        self._written: dict[str, set[str]] = {}
        """Known to be in the annotation: a pod event on them writes nothing."""
        self._wake = asyncio.Event()

    def saw(self, model: str, node: str) -> None:
        """A pod of ``model`` (``namespace/name``) whose copy is in ``node``'s /dev/shm."""
        if node in self._written.get(model, ()) or node in self._pending.get(model, ()):
            return
        self._pending.setdefault(model, set()).add(node)
        self._wake.set()

    def nodes(self, model: Model) -> list[str]:
        """Every node holding a copy of ``model``: its annotation and the nodes not written."""
        return sorted({*recorded(model), *self._pending.get(model.key, ())})

    def check(self, model: Model) -> None:
        """Queue again the nodes written before that ``model``'s annotation lacks (another
        writer replaced its annotations)."""
        have = recorded(model)
        if len(have) >= MAX_NODES:
            return  # full: what it lacks was dropped for the bound
        lost = self._written.get(model.key, set()) - set(have)
        if lost:
            self._written[model.key] -= lost
            for node in sorted(lost):
                self.saw(model.key, node)

    def forget(self, model: str) -> None:
        """Drop what is kept of a deleted Model."""
        self._pending.pop(model, None)
        self._written.pop(model, None)

    async def run(self) -> None:
        """Write the pending nodes as they come, until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            delay = 0.0
            for model in list(self._pending):
                try:
                    await self.flush(model)
                except FlexInferError as err:
                    log.warning("flash nodes of %s not written (retrying): %s", model, err)
                    wait = err.delay if isinstance(err, TemporaryError) else self._retry_s
                    delay = max(delay, wait)
            if delay:
                await asyncio.sleep(delay)
                self._wake.set()

    async def flush(self, model: str) -> None:
        """Merge the pending nodes of ``model`` into its annotation (ConflictError if it kept
        changing)."""
        namespace, _, name = model.partition("/")
        for _ in range(ATTEMPTS):
            nodes = set(self._pending.get(model, ()))
            if not nodes:
                return
            try:
                written = await self._write(namespace, name, nodes)
            except ConflictError:
                continue  # changed since it was read: read it again
            except NotFoundError:
                written = False
            if model not in self._pending:
                return  # forgotten meanwhile: the Model was deleted
            if not written:
                self.forget(model)
                return
            self._written.setdefault(model, set()).update(nodes)
            if not (left := self._pending[model] - nodes):
                del self._pending[model]
            else:
                self._pending[model] = left
            return
        raise ConflictError(f"models {model} kept changing: flash nodes not written")

    async def _write(self, namespace: str, name: str, nodes: set[str]) -> bool:
        """The annotation merged with ``nodes``, guarded by the version it was read at;
        False when the Model is gone."""
        try:
            found = await self._models.get(namespace, name)
        except NotFoundError:
            return False
        meta = found["metadata"]
        annotations = meta.get("annotations")
        have = parse((annotations or {}).get(FLASH_NODES_ANNOTATION))
        wanted = merge(have, nodes)
        if wanted != have:
            ops = [*version_guard(str(meta["resourceVersion"])), *_write_op(annotations, wanted)]
            await self._models.json_patch(namespace, name, ops)
        return True
