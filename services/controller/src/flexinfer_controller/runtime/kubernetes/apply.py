"""Carry out the plan's API calls: ensure rendered objects, scale, clean up.

``plan`` decides purely which call each object needs; this reads the live objects and
makes those calls. An update is a compare-and-swap on the live resourceVersion, so one
that loses to another writer (the Deployment controller writing status) reads again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from flexinfer_common.errors import ConflictError, NotFoundError, TemporaryError
from flexinfer_controller.adapters.kube.workloads import Workloads
from flexinfer_controller.runtime.kubernetes import plan
from flexinfer_controller.runtime.kubernetes.names import Obj

log = logging.getLogger(__name__)
_ATTEMPTS = 5
Decide = Callable[[Obj, Obj | None], plan.Op | None]
"""Which call, if any, brings the live object (None: absent) to the rendered one."""


class Applier:
    """Runs plan Ops against the apiserver."""

    def __init__(self, workloads: Workloads) -> None:
        self._workloads = workloads

    async def run(self, op: plan.Op) -> Obj:
        """One Op as it is."""
        where = (op.group, op.resource, op.namespace)
        name = None if op.verb == "create" else op.name
        return await self._workloads.execute(op.verb, where, name, op.body)

    async def live(self, desired: Obj) -> Obj | None:
        """The live object of ``desired``, None when absent."""
        try:
            return await self.run(plan.read(desired))
        except NotFoundError:
            return None

    async def ensure(self, desired: Obj, decide: Decide = plan.ensure) -> Obj:
        """Create ``desired``, or write its owned fields onto the live object if they differ
        (as ``decide`` says: ``plan.ensure`` unless told otherwise)."""
        for _ in range(_ATTEMPTS):
            live = await self.live(desired)
            op = decide(desired, live)
            if op is None:
                assert live is not None  # an absent object is always created
                return live
            if op.verb == "update":
                log.info("updating %s %s/%s: %s", op.resource, op.namespace, op.name, op.fields)
            try:
                return await self.run(op)
            except ConflictError:
                continue  # created or changed meanwhile: read it again
        kind, name = desired["kind"], desired["metadata"]["name"]
        raise TemporaryError(f"{kind} {name} kept changing while being written", delay=1.0)

    async def scale(self, deployment: Obj, replicas: int) -> None:
        """Set the Deployment's replicas."""
        await self.run(plan.scale(deployment, replicas))

    async def delete_all(self, ops: list[plan.Op]) -> None:
        """Run the cleanup's Ops; what is gone already is fine."""
        for op in ops:
            try:
                await self.run(op)
            except NotFoundError:
                continue
            except ConflictError:
                if op.verb != "create":
                    raise  # a create that finds its object is done
