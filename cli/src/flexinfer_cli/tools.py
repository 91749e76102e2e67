"""Developer subcommands: ``flexinfer model generate`` and ``flexinfer crd generate``."""

from __future__ import annotations

import sys
from pathlib import Path

from flexinfer_cli.args import parser


def model_main(argv: list[str]) -> int:
    """``flexinfer model generate NAME [...]``: delegate to the engine's generator."""
    if not argv or argv[0] != "generate":
        print(
            "usage: flexinfer model generate NAME [--out DIR] [--preset P] [--seed N]",
            file=sys.stderr,
        )
        return 2
    from flexinfer_engine.__main__ import main as engine_main

    return engine_main(["generate", *argv[1:]])


def crd_main(argv: list[str]) -> int:
    """``flexinfer crd generate [--check] [--out DIR]``: write or verify k8s/crds."""
    p = parser("crd generate", "Generate the CRDs in k8s/crds from the pydantic API types.")
    p.add_argument("action", choices=["generate"])
    p.add_argument("--out", type=Path, default=Path("k8s/crds"), help="output directory")
    p.add_argument("--check", action="store_true", help="write nothing; fail if out of date")
    args = p.parse_args(argv)
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


def mx_main(argv: list[str]) -> int:
    """``flexinfer mx ...``: the registry client, as ModelExpress's CLI offers it."""
    from flexinfer_registry.client.mx_cli import main as mx

    return mx(argv)
