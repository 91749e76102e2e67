"""kubectl-like resource commands: apply, get, describe, delete, scale and logs, and the
operator's pin, unpin and unload.

They speak to one ``ResourceClient`` (``client``): the controller's admin API (``local``)
or the Kubernetes apiserver (``kubernetes``). Exit codes: 0 ok; 1 the server refused (401,
404, 409, 422, 5xx); 2 bad usage or input, or no server to reach.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def _lazy(module: str, name: str) -> Callable[[list[str]], int]:
    def run(argv: list[str]) -> int:
        result: int = getattr(importlib.import_module(f"flexinfer_cli.resources.{module}"), name)(
            argv
        )
        return result

    return run


def commands() -> dict[str, Callable[[list[str]], int]]:
    """The commands by name, for ``flexinfer COMMAND`` (each imported when it runs)."""
    return {
        "apply": _lazy("commands", "apply_main"),
        "get": _lazy("commands", "get_main"),
        "describe": _lazy("commands", "describe_main"),
        "delete": _lazy("commands", "delete_main"),
        "scale": _lazy("ops", "scale_main"),
        "logs": _lazy("ops", "logs_main"),
        "pin": _lazy("operate", "pin_main"),
        "unpin": _lazy("operate", "unpin_main"),
        "unload": _lazy("operate", "unload_main"),
    }


USAGE = (
    ("apply -f FILE", "create or update Models, LoRAAdapters, ModelCatalogs (YAML/JSON, DIR, -)"),
    ("get KIND [NAME]", "list models, loraadapters, modelcatalogs (-o yaml|json|wide|name)"),
    ("describe KIND NAME", "a Model, LoRAAdapter or ModelCatalog in detail, with conditions"),
    ("delete KIND NAME", "delete by name (or -f FILE)"),
    ("scale model NAME", "--replicas N: pin N replicas, or 0 to scale to zero when idle"),
    ("logs model NAME", "a replica's output (-f follows, --tail N)"),
    ("pin MODEL", "never evict it from a shared GPU (unpin MODEL undoes it)"),
    ("unload MODEL", "scale it to zero now; its next request brings it back"),
)
"""(synopsis, what it does) for ``flexinfer --help``."""
