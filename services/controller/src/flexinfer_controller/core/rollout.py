"""Which spec changes replace a Model's replicas: the local runtime's template hash.

Kubernetes decides this with the pod template's hash: a Deployment whose template did not
change keeps its pods when the Model's generation moves on. The local runtime has no
template, so the reconciler gives each launch the digest of what the replica runs, and
``Runtime.renew`` carries replicas of an unchanged digest over to the new generation.
Scaling (``spec.serverless``: replicas, idle timeouts, concurrency target) then starts or
stops replicas without restarting the ones that serve.
"""

from __future__ import annotations

import hashlib
import json

from flexinfer_common.api import Model
from flexinfer_controller.backends import LaunchSpec


def template_hash(model: Model, launch: LaunchSpec) -> str:
    """A short digest of the engine ``launch`` runs for ``model``, as rendered by the plan.

    It covers the whole spec but ``serverless``: the pre-start step (quantize, flash copy)
    reads the spec, not the launch. Of the launch it covers what every replica shares, not
    what the starter adds per replica (GPU pinning, trace parent, port) nor the pre-start
    step's copy of the model. A serverless field the backend renders into the engine's
    command changes the launch, so it still replaces the replicas.
    """
    spec = model.spec.model_dump(mode="json", by_alias=True, exclude={"serverless"})
    rendered = {
        "spec": spec,
        "argv": list(launch.argv),
        "served_name": launch.served_name,
        "ready_fd_flag": launch.ready_fd_flag,
        "env": dict(launch.env),
        "gpu": [launch.gpu_vendor, launch.gpu_arch],
        "health_path": launch.health_path,
        "http_ready": repr(launch.http_ready),
    }
    text = json.dumps(rendered, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
