"""``flexinfer render -f model.yaml``: the objects the controller would create, as YAML.

No cluster is needed: the Model is rendered by the kubernetes runtime's own renderers
(``flexinfer_controller.runtime.kubernetes``) with the choices the controller makes when it
first sees the Model: the Deployment starts at the desired replica count, or 0 while a
prefetch has to fill the cache (cache gating). ``--gpu-vendor`` stands in for detectGPU
when the Model says ``gpu.vendor: auto``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import pydantic
import yaml

from flexinfer_cli.args import parser as make_parser
from flexinfer_common.api import Model, ModelDeployment
from flexinfer_common.api.conversion import to_model
from flexinfer_common.errors import FlexInferError
from flexinfer_controller.backends.registry import default_backends
from flexinfer_controller.core.desired import desired_replicas
from flexinfer_controller.runtime.kubernetes import (
    GPUPlacement,
    RenderOptions,
    build_context,
    render_cleanup,
    render_context,
)

EXIT_OK, EXIT_BAD_INPUT = 0, 2
DESCRIPTION = """Print every Kubernetes object the controller creates for the Models in FILE
(Service, model cache PVC, prefetch and quantization Jobs, ConfigMap, Deployment,
PodDisruptionBudget) as multi-document YAML, without a cluster. Exit codes: 0 rendered,
2 bad file or a Model that cannot run (one line on stderr)."""


class BadInputError(Exception):
    """The file, or a Model in it, cannot be rendered (exit code 2)."""


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def build_parser() -> argparse.ArgumentParser:
    """The ``flexinfer render`` parser."""
    p = make_parser("render", DESCRIPTION)
    p.add_argument(
        "-f", "--filename", required=True, metavar="FILE",
        help="a Model (or legacy ModelDeployment) manifest; '-' reads stdin",
    )  # fmt: skip
    p.add_argument(
        "--runtime", default="kubernetes", choices=["kubernetes"],
        help="the runtime whose objects to print (only kubernetes creates objects)",
    )  # fmt: skip
    p.add_argument(
        "--gpu-vendor", default="nvidia", choices=["nvidia", "amd", "intel", "cpu"],
        help="the vendor detectGPU would find, for gpu.vendor: auto (default nvidia)",
    )  # fmt: skip
    p.add_argument("--gpu-arch", help="the detected GPU architecture (sm_89, gfx1100, ...)")
    p.add_argument("--replicas", type=int, help="the Deployment's replicas (default: as created)")
    p.add_argument(
        "--cleanup", action="store_true",
        help="print what deleting the Models creates instead (the flash cleanup Jobs)",
    )  # fmt: skip
    p.add_argument(
        "--node", action="append", dest="nodes", metavar="NODE",
        help="with --cleanup: a node the Model's pods ran on, one Job each (repeatable;"
             " default: the placeholder NODE)",
    )  # fmt: skip
    return p


def _documents(path: str, stdin: TextIO) -> list[Any]:
    try:
        text = stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except OSError as exc:
        raise BadInputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise BadInputError(f"{path} is not YAML: {str(exc).splitlines()[0]}") from exc


def _first_error(exc: pydantic.ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(p) for p in error["loc"]) or "document"
    return f"{where}: {error['msg']}"


def models(path: str, stdin: TextIO) -> Iterator[Model]:
    """The Models in the file (ModelDeployments converted); BadInputError for anything else."""
    documents = _documents(path, stdin)
    if not documents:
        raise BadInputError(f"{path} holds no documents")
    for index, doc in enumerate(documents, start=1):
        kind = doc.get("kind") if isinstance(doc, dict) else None
        kinds: dict[Any, type[Model] | type[ModelDeployment]] = {
            "Model": Model, "ModelDeployment": ModelDeployment,
        }  # fmt: skip
        if kind not in kinds:
            raise BadInputError(f"{path}: document {index} is a {kind!r}, not a Model")
        try:
            obj = kinds[kind].model_validate(doc)
        except pydantic.ValidationError as exc:
            raise BadInputError(f"{path}: document {index}: {_first_error(exc)}") from exc
        yield to_model(obj) if isinstance(obj, ModelDeployment) else obj


def _render(model: Model, args: argparse.Namespace) -> list[dict[str, Any]]:
    backends = default_backends()
    options = RenderOptions(gpu=GPUPlacement(args.gpu_vendor, args.gpu_arch))
    ctx = build_context(model, backends, options)
    if args.cleanup:
        return render_cleanup(model, backends, options, args.nodes or ["NODE"])
    replicas = args.replicas
    if replicas is None:
        gated = ctx.cache.fetch is not None  # the prefetch has not run yet
        replicas = 0 if gated else desired_replicas(model.spec, None, datetime.now(UTC)).replicas
    return render_context(
        dataclasses.replace(ctx, options=dataclasses.replace(options, replicas=replicas))
    )


def run(argv: list[str], stdin: TextIO, stdout: TextIO) -> int:
    """Render; BadInputError for a bad file or a Model that cannot run."""
    args = build_parser().parse_args(argv)
    if args.replicas is not None and args.replicas < 0:
        raise BadInputError(f"--replicas must be 0 or more, not {args.replicas}")
    rendered: list[dict[str, Any]] = []
    for model in models(args.filename, stdin):
        try:
            rendered += _render(model, args)
        except FlexInferError as exc:
            raise BadInputError(f"{args.filename}: Model {model.key}: {exc}") from exc
    if rendered:
        stdout.write(yaml.dump_all(rendered, Dumper=_NoAliases, sort_keys=False))
    return EXIT_OK


def main(argv: list[str]) -> int:
    """``flexinfer render ...``: exit 0, or 2 with one line on stderr."""
    try:
        return run(argv, sys.stdin, sys.stdout)
    except BadInputError as exc:
        print(f"flexinfer render: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
