"""``flexinfer apply|get|describe|delete``: kubectl's verbs on Models, LoRAAdapters and
ModelCatalogs."""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Callable

from flexinfer_cli.args import parser
from flexinfer_cli.resources.client import Obj, ResourceClient, add_connection_arguments, connect
from flexinfer_cli.resources.errors import EXIT_USAGE, CliError, is_conflict, is_not_found
from flexinfer_cli.resources.kinds import Kind, find_kind
from flexinfer_cli.resources.manifests import Manifest, load
from flexinfer_cli.resources.printers import FORMATS, describe, render

Handler = Callable[[argparse.Namespace, ResourceClient], int]
SERVER_METADATA = ("resourceVersion", "uid", "creationTimestamp", "generation",
                   "deletionTimestamp", "managedFields")  # fmt: skip
"""What a create must not send: the server sets it (a document from ``get -o yaml`` has it)."""


def run(prog: str, p: argparse.ArgumentParser, handler: Handler, argv: list[str]) -> int:
    """Parse, connect, run ``handler``; a CliError becomes one line on stderr and its code."""
    add_connection_arguments(p)
    args = p.parse_args(argv)
    try:
        client = connect(args)
        try:
            return handler(args, client)
        finally:
            client.close()
    except CliError as exc:
        print(f"flexinfer {prog}: {exc}", file=sys.stderr)
        return exc.code
    except BrokenPipeError:
        return 0  # `flexinfer logs ... | head`: the reader has what it wanted


def _output_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=FORMATS, default="table",
                   help="table (default), wide, yaml, json or name")  # fmt: skip


def _files_argument(p: argparse.ArgumentParser, *, required: bool) -> None:
    p.add_argument("-f", "--filename", action="append", required=required, metavar="FILE",
                   help="a YAML or JSON file (many documents allowed), a directory of *.yaml, "
                   "*.yml and *.json, or - for stdin; repeatable")  # fmt: skip


# -- apply ------------------------------------------------------------------------------


def replacement(current: Obj, doc: Obj) -> Obj:
    """``current`` with the document's spec, labels and annotations: what apply PUTs.

    The server's metadata (finalizers included) is kept, and so is the resourceVersion
    just read: a document's own (``get -o yaml`` output has one) is stale as soon as the
    controller writes status, and apply declares the fields it owns, as kubectl does.
    """
    body = copy.deepcopy(current)
    body.pop("status", None)
    meta, wanted = body.setdefault("metadata", {}), doc.get("metadata") or {}
    meta["labels"] = wanted.get("labels") or {}
    meta["annotations"] = wanted.get("annotations") or {}
    meta["finalizers"] = list(dict.fromkeys(
        [*(meta.get("finalizers") or []), *(wanted.get("finalizers") or [])]
    ))  # fmt: skip
    body["spec"] = doc.get("spec") or {}
    return body


def _changed(before: Obj, after: Obj) -> bool:
    """Whether a replace changed what apply owns: the spec (generation), labels, annotations."""
    old, new = before.get("metadata") or {}, after.get("metadata") or {}
    if old.get("generation") != new.get("generation"):
        return True
    return any((old.get(k) or {}) != (new.get(k) or {}) for k in ("labels", "annotations"))


def apply_one(client: ResourceClient, m: Manifest, attempts: int = 3) -> str:
    """Create or replace one object: ``created``, ``configured`` or ``unchanged``.

    The replace is conditional on the resourceVersion read; when the object changed in
    between (the controller writing status), it is read and written again.
    """
    for attempt in range(attempts):
        try:
            current = client.get(m.kind, m.namespace, m.name)
        except CliError as exc:
            if not is_not_found(exc):
                raise
            client.create(m.kind, m.namespace, _creatable(m.body))
            return "created"
        try:
            stored = client.replace(m.kind, m.namespace, replacement(current, m.body))
        except CliError as exc:
            if is_conflict(exc) and attempt + 1 < attempts:
                continue
            raise
        return "configured" if _changed(current, stored) else "unchanged"
    raise AssertionError("unreachable")


def _creatable(doc: Obj) -> Obj:
    """The document without status and the metadata only a server sets."""
    body = copy.deepcopy(doc)
    body.pop("status", None)
    meta = body.get("metadata")
    if isinstance(meta, dict):
        for key in SERVER_METADATA:
            meta.pop(key, None)
    return body


def _apply(args: argparse.Namespace, client: ResourceClient) -> int:
    manifests = load(args.filename, args.namespace)  # every document is valid, or none is sent
    for m in manifests:
        try:
            result = apply_one(client, m)
        except CliError as exc:
            raise CliError(f"{m.where}: {m.kind.ref}/{m.name}: {exc}", exc.code) from exc
        print(f"{m.kind.ref}/{m.name} {result}", flush=True)
    return 0


def apply_main(argv: list[str]) -> int:
    """``flexinfer apply -f FILE|DIR|-``."""
    p = parser(
        "apply", "Create or update Models, LoRAAdapters and ModelCatalogs from YAML or JSON."
    )
    _files_argument(p, required=True)
    return run("apply", p, _apply, argv)


# -- get and describe -----------------------------------------------------------------


def _get(args: argparse.Namespace, client: ResourceClient) -> int:
    kind = find_kind(args.kind)
    if args.names:
        items = [client.get(kind, args.namespace, name) for name in args.names]
    else:
        items = client.list(kind, args.namespace)
    if not items and args.output in ("table", "wide"):
        where = f"in namespace {args.namespace}" if args.namespace else "in the namespace"
        print(f"No {kind.plural} found {where}.", file=sys.stderr)
        return 0
    single = len(args.names) == 1
    sys.stdout.write(render(kind, items, args.output, single=single))
    return 0


def get_main(argv: list[str]) -> int:
    """``flexinfer get models|loraadapters|modelcatalogs [NAME...] [-o yaml|json]``."""
    p = parser("get", "List Models, LoRAAdapters or ModelCatalogs, or show some by name.")
    p.add_argument(
        "kind",
        metavar="KIND",
        help="models, loraadapters or modelcatalogs (or model, mdl, lora, mcat...)",
    )
    p.add_argument("names", nargs="*", metavar="NAME")
    _output_argument(p)
    return run("get", p, _get, argv)


def _describe(args: argparse.Namespace, client: ResourceClient) -> int:
    kind = find_kind(args.kind)
    for i, name in enumerate(args.names):
        if i:
            print()
        sys.stdout.write(describe(kind, client.get(kind, args.namespace, name)))
    return 0


def describe_main(argv: list[str]) -> int:
    """``flexinfer describe model NAME``."""
    p = parser("describe", "Show a Model, LoRAAdapter or ModelCatalog: spec, status, conditions.")
    p.add_argument("kind", metavar="KIND", help="model, loraadapter or modelcatalog")
    p.add_argument("names", nargs="+", metavar="NAME")
    return run("describe", p, _describe, argv)


# -- delete ---------------------------------------------------------------------------


def _targets(args: argparse.Namespace) -> list[tuple[Kind, str | None, str]]:
    if args.filename:
        if args.kind or args.names:
            raise CliError("give either -f FILE or KIND NAME..., not both", EXIT_USAGE)
        return [(m.kind, m.namespace, m.name) for m in load(args.filename, args.namespace)]
    if not args.kind or not args.names:
        raise CliError("give KIND NAME... or -f FILE", EXIT_USAGE)
    kind = find_kind(args.kind)
    return [(kind, args.namespace, name) for name in args.names]


def _delete(args: argparse.Namespace, client: ResourceClient) -> int:
    failed = 0
    for kind, namespace, name in _targets(args):
        try:
            client.delete(kind, namespace, name)
        except CliError as exc:
            if args.ignore_not_found and is_not_found(exc):
                continue
            # As kubectl: report it, go on with the rest, and fail at the end.
            print(f"flexinfer delete: {kind.ref}/{name}: {exc}", file=sys.stderr)
            failed = failed or exc.code
            continue
        print(f"{kind.ref}/{name} deleted", flush=True)
    return failed


def delete_main(argv: list[str]) -> int:
    """``flexinfer delete KIND NAME...`` or ``flexinfer delete -f FILE``."""
    p = parser(
        "delete", "Delete Models, LoRAAdapters or ModelCatalogs by name or by files' documents."
    )
    p.add_argument("kind", nargs="?", metavar="KIND")
    p.add_argument("names", nargs="*", metavar="NAME")
    _files_argument(p, required=False)
    p.add_argument("--ignore-not-found", action="store_true", help="a missing object is no error")
    return run("delete", p, _delete, argv)
