"""Tool subcommands: ``flexinfer model generate|generate-adapter``, ``crd generate``,
``docs config``, ``mx`` and ``flash-load``."""

from __future__ import annotations

import sys
from pathlib import Path

from flexinfer_cli.args import subcommands


def model_main(argv: list[str]) -> int:
    """``flexinfer model generate NAME [...]`` and ``flexinfer model generate-adapter NAME
    [...]``: the engine's reference-model and LoRA-adapter generators."""
    # The engine (and torch) loads only for this command: the other commands start faster.
    from flexinfer_engine.__main__ import (
        ADAPTER_DESCRIPTION,
        ADAPTER_HELP,
        GENERATE_DESCRIPTION,
        GENERATE_HELP,
        add_generate_adapter_arguments,
        add_generate_arguments,
        generate,
        generate_adapter_command,
    )

    top, commands = subcommands("model", "Reference models for the FlexInfer engine.")
    add_generate_arguments(
        commands.add_parser("generate", help=GENERATE_HELP, description=GENERATE_DESCRIPTION)
    )
    add_generate_adapter_arguments(
        commands.add_parser("generate-adapter", help=ADAPTER_HELP, description=ADAPTER_DESCRIPTION)
    )
    args = top.parse_args(argv)
    if args.command == "generate-adapter":
        return generate_adapter_command(args, prog="flexinfer model generate-adapter")
    return generate(args, prog="flexinfer model generate")


def crd_main(argv: list[str]) -> int:
    """``flexinfer crd generate [--check] [--out DIR]``: write or verify k8s/crds."""
    top, commands = subcommands("crd", "The Kubernetes CustomResourceDefinitions of FlexInfer.")
    p = commands.add_parser(
        "generate",
        help="write k8s/crds from the pydantic API types (--check: verify only)",
        description="Generate the CRDs in k8s/crds from the pydantic API types.",
    )
    p.add_argument("--out", type=Path, default=Path("k8s/crds"), help="output directory")
    p.add_argument("--check", action="store_true", help="write nothing; fail if out of date")
    args = top.parse_args(argv)
    from flexinfer_common.crd import write_crds

    changed = write_crds(args.out, check=args.check)
    if args.check and changed:
        names = ", ".join(str(path) for path in changed)
        print(
            f"flexinfer crd: out of date: {names} (run 'flexinfer crd generate')", file=sys.stderr
        )
        return 1
    for path in changed:
        print(f"wrote {path}")
    return 0


def docs_main(argv: list[str]) -> int:
    """``flexinfer docs config [--check] [--out FILE]``: write or verify the generated docs."""
    top, commands = subcommands("docs", "Documentation pages generated from the code.")
    p = commands.add_parser(
        "config",
        help="write docs/configuration.md from the settings classes (--check: verify only)",
        description="Generate the configuration reference from the pydantic-settings classes.",
    )
    p.add_argument("--out", type=Path, default=Path("docs/configuration.md"), help="output file")
    p.add_argument("--check", action="store_true", help="write nothing; fail if out of date")
    args = top.parse_args(argv)
    from flexinfer_cli.config_reference import REGENERATE, write

    changed = write(args.out, check=args.check)
    if args.check and changed:
        print(f"flexinfer docs: out of date: {args.out} (run '{REGENERATE}')", file=sys.stderr)
        return 1
    if changed:
        print(f"wrote {args.out}")
    return 0


def mx_main(argv: list[str]) -> int:
    """``flexinfer mx ...``: the registry client, as ModelExpress's CLI offers it."""
    from flexinfer_registry.client.mx_cli import main as mx

    return mx(argv)


def flash_load_main(argv: list[str]) -> int:
    """``flexinfer flash-load [cleanup] ...``: the controller's flash loader (PVC -> tmpfs)."""
    from flexinfer_controller.flashload.__main__ import main as flash_load

    return flash_load(argv, prog="flexinfer flash-load")
