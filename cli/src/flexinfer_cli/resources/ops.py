"""``flexinfer scale`` and ``flexinfer logs``: a Model's replica count and its output.

A Model has no ``spec.replicas``: its replica count follows ``spec.serverless``. So
``scale model NAME --replicas N`` means:

* ``N >= 1`` pins it: ``minReplicas = maxReplicas = N`` (N replicas whether or not there
  are requests);
* ``N = 0`` lets it go to zero: ``minReplicas = 0``, ``scaleToZero`` and ``enabled`` true,
  ``maxReplicas`` kept; the model then runs only while requests come, and stops after its
  idle timeout.

It is a read-modify-write of the whole object, conditional on the resourceVersion read:
a change in between is a 409 (exit 1), and nothing else of the Model changes.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from flexinfer_cli.args import parser
from flexinfer_cli.resources.client import LogOptions, Obj, ResourceClient
from flexinfer_cli.resources.commands import run
from flexinfer_cli.resources.errors import CliError, is_conflict, usage_error
from flexinfer_cli.resources.kinds import MODEL, find_kind

MAX_REPLICAS = 10
"""spec.serverless.maxReplicas's bound in the CRD."""


def scaled(model: Obj, replicas: int) -> Obj:
    """``model`` (a copy) with spec.serverless set for ``replicas``, nothing else changed."""
    body: dict[str, Any] = {k: v for k, v in model.items() if k != "status"}
    spec = dict(body.get("spec") or {})
    serverless = dict(spec.get("serverless") or {})
    if replicas >= 1:
        serverless["minReplicas"] = serverless["maxReplicas"] = replicas
    else:
        serverless.update(minReplicas=0, scaleToZero=True, enabled=True)
    spec["serverless"] = serverless
    body["spec"] = spec
    return body


def _model_kind(name: str) -> None:
    if find_kind(name) is not MODEL:
        raise usage_error(f"only models can be scaled or show logs, not {name!r}")


def _scale(args: argparse.Namespace, client: ResourceClient) -> int:
    _model_kind(args.kind)
    current = client.get(MODEL, args.namespace, args.name)
    try:
        client.replace(MODEL, args.namespace, scaled(current, args.replicas))
    except CliError as exc:
        if is_conflict(exc):
            raise CliError(
                f"{MODEL.ref}/{args.name} changed while it was being scaled ({exc}); "
                "run the command again", exc.code,
            ) from exc  # fmt: skip
        raise
    print(f"{MODEL.ref}/{args.name} scaled", flush=True)
    return 0


def _replica_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 0 <= value <= MAX_REPLICAS:
        raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_REPLICAS}, not {value}")
    return value


def scale_main(argv: list[str]) -> int:
    """``flexinfer scale model NAME --replicas N``."""
    p = parser("scale", "Pin a Model to N replicas (N >= 1), or let it scale to zero (N = 0).")
    p.add_argument("kind", metavar="KIND", help="model")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--replicas", type=_replica_count, required=True, metavar="N",
                   help=f"0..{MAX_REPLICAS}: N >= 1 sets minReplicas = maxReplicas = N; "
                   "0 sets minReplicas = 0 (scale to zero when idle)")  # fmt: skip
    return run("scale", p, _scale, argv)


def _logs(args: argparse.Namespace, client: ResourceClient) -> int:
    _model_kind(args.kind)
    options = LogOptions(follow=args.follow, tail_lines=args.tail, replica=args.replica)
    out = sys.stdout.buffer
    for chunk in client.logs(args.namespace, args.name, options):
        out.write(chunk)
        out.flush()
    return 0


def logs_main(argv: list[str]) -> int:
    """``flexinfer logs model NAME [-f] [--tail N] [--replica ID]``."""
    p = parser("logs", "Print a Model replica's output (local: the engine's captured "
               "stdout/stderr; Kubernetes: the pod's log).")  # fmt: skip
    p.add_argument("kind", metavar="KIND", help="model")
    p.add_argument("name", metavar="NAME")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new output")
    p.add_argument("--tail", type=int, metavar="N", help="start N lines before the end")
    p.add_argument("--replica", help="a replica id (local) or pod name (default: the newest)")
    return run("logs", p, _logs, argv)
