"""The scale-up's traceparent for the engine pods it starts: a per-Model ConfigMap.

Locally the controller hands an engine ``TRACEPARENT`` in its environment, so the engine's
``engine.load_weights`` span joins the cold request's trace. A Deployment's pod template is
shared by every pod it makes, and changing it (a new env value, a new annotation) makes a
new ReplicaSet, which rolls the replicas already serving. So the template carries a fixed
reference instead, ``TRACEPARENT`` from the key ``traceparent`` of ConfigMap
``<model>-trace`` (``optional``: absent map or key, no variable), and each ``start`` writes
that ConfigMap before it raises the replicas. The kubelet resolves the reference when it
creates the container, so the new pod reads the traceparent of the scale-up that made it.

Why not the alternatives:

* a template annotation read through the Downward API, set only on 0 -> 1: it still changes
  the template (a new ReplicaSet per cold start), and a 1 -> 2 scale-up could not set its
  own, so the second pod would join the first request's trace, hours old;
* the value in the template only while no pod runs: the same new ReplicaSet per cold start,
  and the template hash would differ between the 0 -> 1 and the 1 -> 2 renders, which the
  runtime reads as a new template (a rollout), unless the hash skipped it.

An untraced start writes the ConfigMap empty, so a later pod never joins an old trace. A
container restarted by the kubelet reads whatever the map holds then (the latest traced
scale-up's parent, or nothing): its reload is a new load, so that is at worst a span under
a recent scale-up rather than a lost one.
"""

from __future__ import annotations

from flexinfer_common.api import Model
from flexinfer_controller.runtime.kubernetes.names import Obj, metadata, object_name

TRACEPARENT_ENV = "TRACEPARENT"
"""What the engine reads (``runtime.engine_env.TRACEPARENT_ENV``, the W3C name)."""
TRACEPARENT_KEY = "traceparent"


def trace_config_map_name(model: Model) -> str:
    """``<model>-trace``."""
    return object_name(model.metadata.name, "trace")


def trace_env(model: Model) -> Obj:
    """The engine container's ``TRACEPARENT``, from the ConfigMap (unset when it is empty)."""
    ref = {"name": trace_config_map_name(model), "key": TRACEPARENT_KEY, "optional": True}
    return {"name": TRACEPARENT_ENV, "valueFrom": {"configMapKeyRef": ref}}


def trace_config_map(model: Model, deployment: Obj, traceparent: str | None) -> Obj:
    """The ConfigMap the next pod of ``deployment`` reads ``TRACEPARENT`` from (empty:
    untraced), labelled as the Deployment is."""
    obj_labels = dict(deployment["metadata"]["labels"])
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(model, trace_config_map_name(model), obj_labels, {}),
        "data": {TRACEPARENT_KEY: traceparent} if traceparent else {},
    }
