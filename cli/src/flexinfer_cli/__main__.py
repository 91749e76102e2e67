"""``flexinfer``: the embedded stack (``flexinfer up``), every service, and dev tools.

Service subcommands hand their arguments to that service's own ``main`` so that
``flexinfer proxy --port 0`` and ``python -m flexinfer_proxy --port 0`` are the same program.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence

from flexinfer_common.errors import FlexInferError

SERVICES = ("proxy", "controller", "scheduler", "registry", "agent", "engine")


def _service_main(service: str) -> Callable[[list[str]], int]:
    def run(argv: list[str]) -> int:
        module = importlib.import_module(f"flexinfer_{service}.__main__")
        # The service's own parser, named as the user called it ("flexinfer proxy").
        result: int = module.main(argv, prog=f"flexinfer {service}")
        return result

    return run


def _lazy(module: str, name: str) -> Callable[[list[str]], int]:
    """``module.name``, imported when called: a command loads only what it runs."""

    def run(argv: list[str]) -> int:
        result: int = getattr(importlib.import_module(module), name)(argv)
        return result

    return run


def _tools() -> dict[str, Callable[[list[str]], int]]:
    from flexinfer_cli import resources

    return {
        "up": _lazy("flexinfer_cli.up", "main"),
        "model": _lazy("flexinfer_cli.tools", "model_main"),
        "crd": _lazy("flexinfer_cli.tools", "crd_main"),
        "docs": _lazy("flexinfer_cli.tools", "docs_main"),
        "mx": _lazy("flexinfer_cli.tools", "mx_main"),
        "flash-load": _lazy("flexinfer_cli.tools", "flash_load_main"),
        "render": _lazy("flexinfer_cli.render", "main"),
        "bench": _lazy("flexinfer_cli.bench", "main"),
        **resources.commands(),
    }


def _usage() -> str:
    from flexinfer_cli.resources import USAGE

    return (
        "usage: flexinfer COMMAND [ARGS...]\n\n"
        "commands:\n"
        "  up                 run the embedded stack (proxy on http://127.0.0.1:8080)\n"
        "  model generate     write a deterministic reference model\n"
        "  model generate-adapter  write a deterministic LoRA adapter for such a model\n"
        "  crd generate       regenerate k8s/crds from the API types (--check: verify only)\n"
        "  docs config        regenerate docs/configuration.md (--check: verify only)\n"
        "  mx                 ModelExpress-compatible registry client (health, ping, model ...)\n"
        "  flash-load         copy a model to tmpfs for a fast engine start (or cleanup)\n"
        "  render             print the Kubernetes objects of a Model (-f FILE), no cluster\n"
        "  bench tps          measure a Model's tokens/s and store it for placement\n"
        + "".join(f"  {synopsis:<18} {what}\n" for synopsis, what in USAGE)
        + "".join(f"  {name:<18} run the {name} service on its own\n" for name in SERVICES)
        + "\nRun 'flexinfer COMMAND --help' for the options of a command.\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch ``flexinfer COMMAND ...``; returns the process exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(_usage(), file=sys.stderr, end="")
        return 2
    if args[0] in ("-h", "--help", "help"):
        print(_usage(), end="")
        return 0
    command, rest = args[0], args[1:]
    handlers = _tools()
    handlers.update({name: _service_main(name) for name in SERVICES})
    handler = handlers.get(command)
    if handler is None:
        print(f"flexinfer: unknown command {command!r}; see 'flexinfer --help'", file=sys.stderr)
        return 2
    try:
        return handler(rest)
    except FlexInferError as exc:
        print(f"flexinfer {command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
