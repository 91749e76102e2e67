"""``flexinfer pin|unpin|unload MODEL...``: an operator's hand on running Models.

* ``pin`` sets the annotation ``flexinfer.ai/pinned: "true"``: the shared-GPU arbiter never
  evicts the Model (it still leaves the GPU when its own idle timeout scales it to zero);
  ``unpin`` removes it.
* ``unload`` scales the Model to zero now, as llama-swap's /unload: the annotation
  ``flexinfer.ai/unloaded-at`` makes the controller ignore the activity before it, so the
  engines stop, and the next request brings the Model back as after an idle timeout. A
  Model whose spec keeps replicas up (``minReplicas`` > 0, ``scaleToZero: false``,
  ``serverless.enabled: false``, ``spec.endpoints``) is refused (exit 1): ``flexinfer scale
  model NAME --replicas 0`` first.

Local mode asks the controller's admin API (an unload answers once the engines exited);
Kubernetes writes the annotations through the apiserver.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from flexinfer_cli.args import parser
from flexinfer_cli.resources.client import Obj, ResourceClient
from flexinfer_cli.resources.commands import run
from flexinfer_cli.resources.errors import CliError
from flexinfer_cli.resources.kinds import MODEL

Action = Callable[[ResourceClient, str | None, str], Obj]


def _each(
    verb: str, done: str, action: Action
) -> Callable[[argparse.Namespace, ResourceClient], int]:
    """Apply ``action`` to every named Model: report each failure, go on, fail at the end."""

    def handler(args: argparse.Namespace, client: ResourceClient) -> int:
        failed = 0
        for name in args.names:
            try:
                action(client, args.namespace, name)
            except CliError as exc:
                if len(args.names) == 1:
                    raise
                print(f"flexinfer {verb}: {MODEL.ref}/{name}: {exc}", file=sys.stderr)
                failed = failed or exc.code
                continue
            print(f"{MODEL.ref}/{name} {done}", flush=True)
        return failed

    return handler


def _main(verb: str, done: str, description: str, action: Action, argv: list[str]) -> int:
    p = parser(verb, description)
    p.add_argument("names", nargs="+", metavar="MODEL", help="the Model's name")
    return run(verb, p, _each(verb, done, action), argv)


def pin_main(argv: list[str]) -> int:
    """``flexinfer pin MODEL...``."""
    return _main(
        "pin",
        "pinned",
        'Pin Models (annotation flexinfer.ai/pinned: "true"): never evicted from a shared GPU.',
        lambda client, namespace, name: client.pin(namespace, name, True),
        argv,
    )


def unpin_main(argv: list[str]) -> int:
    """``flexinfer unpin MODEL...``."""
    return _main(
        "unpin",
        "unpinned",
        "Unpin Models (remove flexinfer.ai/pinned): the arbiter may evict them again.",
        lambda client, namespace, name: client.pin(namespace, name, False),
        argv,
    )


def unload_main(argv: list[str]) -> int:
    """``flexinfer unload MODEL...``."""
    return _main(
        "unload",
        "unloaded",
        "Scale Models to zero now (annotation flexinfer.ai/unloaded-at); the next request "
        "brings each back. Refused for a Model whose spec keeps replicas (minReplicas > 0).",
        lambda client, namespace, name: client.unload(namespace, name),
        argv,
    )
