"""``flexinfer mx``: the ModelExpress CLI (health, ping, model download/list-files/clear/validate).

Exit codes, for scripts:

- 0: success;
- 1: the operation failed (model not found, download ERROR, validation mismatch, …);
- 2: usage error (bad flags or arguments);
- 3: the registry server could not be reached.

The server address is ``--server``, else ``MODEL_EXPRESS_URL``, else ``MX_SERVER_ADDRESS``,
else ``localhost:8001``. ``--output json`` prints one JSON document per command on stdout;
errors always go to stderr as one line.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flexinfer_common.errors import FlexInferError
from flexinfer_common.malloc import keep_large_buffers
from flexinfer_registry.client.addresses import TlsNotSupportedError
from flexinfer_registry.client.mx_client import (
    PROVIDERS,
    MxClient,
    NotCachedError,
    OperationFailedError,
    ServerUnreachableError,
    server_address,
)
from flexinfer_registry.client.mx_direct import cache_dir, download_direct, target_dir
from flexinfer_registry.client.mx_fetch import complete, copy_size, marker, write_streamed
from flexinfer_registry.client.mx_output import Output, byte_counts

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
TOKEN_ENV = "FLEXINFER_REGISTRY_AUTH_TOKEN"
"""The registry's own setting: where server and CLI share the secret, one variable serves both."""
STRATEGIES = ("SmartFallback", "ServerOnly", "DirectOnly")
DEFAULT_PROVIDER = "hugging-face"


class UsageError(Exception):
    """Bad arguments (exit code 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would sys.exit(2) itself
        raise UsageError(message)


def build_parser(prog: str = "flexinfer mx") -> argparse.ArgumentParser:
    """The argument parser (exposed for the lead's ``flexinfer`` CLI and for tests)."""
    parser = _Parser(prog=prog, description="Talk to the FlexInfer model registry (ModelExpress).")
    parser.add_argument(
        "--server", help="registry gRPC address (MODEL_EXPRESS_URL / MX_SERVER_ADDRESS)"
    )
    parser.add_argument(
        "--output",
        "--format",
        dest="output",
        default="human",
        choices=("human", "json", "json-pretty"),
        help="output format",
    )
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per unary call")
    parser.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV) or None,
        help=f"bearer token for a registry started with one ({TOKEN_ENV}; the variable keeps "
        "it out of the process list)",
    )
    commands = parser.add_subparsers(
        dest="command", required=True, parser_class=_Parser, metavar="COMMAND"
    )
    for name, text in (("health", "check the server's health"), ("ping", "ping the server")):
        commands.add_parser(name, help=text, description=_sentence(text))
    _add_model_actions(
        commands.add_parser(
            "model",
            help="model cache operations",
            description="Download, list, check or delete cached models.",
        )
    )
    return parser


def _add_model_actions(model: argparse.ArgumentParser) -> None:
    """``flexinfer mx model ACTION``: download, list-files, clear and validate."""
    actions = model.add_subparsers(
        dest="action", required=True, parser_class=_Parser, metavar="ACTION"
    )
    for action, text in (
        ("download", "download a model into the registry's cache"),
        ("list-files", "list a cached model's files and sizes"),
        ("clear", "delete a cached model"),
        ("validate", "stream a cached model and check every file against its listing"),
    ):
        sub = actions.add_parser(action, help=text, description=_sentence(text))
        sub.add_argument(
            "name",
            help="model name: org/model, s3://…, gs://…, ngc://…, file://…, "
            "oci://host[:port]/repo[:tag|@sha256:…]",
        )
        sub.add_argument(
            "--provider",
            default=DEFAULT_PROVIDER,
            choices=sorted(PROVIDERS),
            help=f"where an org/model name is looked up (default {DEFAULT_PROVIDER}); "
            "a URL's scheme picks its own, and 'oci' makes host/repo:tag an oci:// name",
        )
        if action in ("download", "list-files", "validate"):
            sub.add_argument("--revision", help="branch, tag or commit to pin")
    download = actions.choices["download"]
    download.add_argument(
        "--strategy",
        default="SmartFallback",
        choices=STRATEGIES,
        help="ServerOnly: through the registry; DirectOnly: from the provider "
        "into a local cache; SmartFallback (default): the registry, else "
        "directly",
    )
    download.add_argument("--ignore-weights", action="store_true", help="skip weight files")
    download.add_argument(
        "--termination-log",
        metavar="PATH",
        help='on success, write {"sizeBytes": N} (the bytes of the copy) to PATH; a '
        "Kubernetes prefetch Job passes /dev/termination-log, which its pod's status carries",
    )
    download.add_argument(
        "--cache-dir",
        help="local cache: DirectOnly/fallback downloads land here "
        "(MODEL_EXPRESS_CACHE_DIRECTORY); given as a flag, a server download is also "
        "copied here, to the same path",
    )


def _sentence(text: str) -> str:
    """A subcommand's one-line help as its description: capitalised, with a full stop."""
    return f"{text[0].upper()}{text[1:]}."


def _download(args: argparse.Namespace, client: MxClient, out: Output) -> int:
    provider = PROVIDERS[args.provider]
    if args.strategy != "DirectOnly":
        try:
            return _download_server(args, client, out, provider)
        except ServerUnreachableError as exc:
            if args.strategy == "ServerOnly":
                raise
            print(f"warning: {exc}; downloading directly", file=out.stderr)
    with out.progress(f"{args.name} (direct)") as sink:
        data = download_direct(args.name, provider, args.revision,
                               ignore_weights=args.ignore_weights,
                               root=cache_dir(args.cache_dir), progress=sink.bytes)  # fmt: skip
    _report_size(args, int(data["total_size"]), out)
    out.result({"ok": True, "strategy": "direct", **data},
               f"{args.name}: DOWNLOADED to {data['path']} ({data['files']} files, "
               f"{data['total_size']} bytes)")  # fmt: skip
    return EXIT_OK


def _download_server(args: argparse.Namespace, client: MxClient, out: Output, provider: int) -> int:
    last: dict[str, Any] = {}
    with out.progress(f"{args.name} (server)") as sink:
        for update in client.ensure(args.name, provider, args.revision, args.ignore_weights):
            last = update
            text = update.get("message") or update["status"]
            counts = byte_counts(text)
            if counts is None:
                sink.status(text)
            else:  # the bar shows them: the text would only repeat it
                sink.bytes(*counts)
                sink.status("")
        if last.get("status") == "DOWNLOADED":
            sink.finished()
    status = last.get("status", "ERROR")
    if status != "DOWNLOADED":
        message = last.get("message") or "the server ended the stream without a final status"
        out.error(f"{args.name}: {status}: {message}", {"update": last})
        return EXIT_FAILED
    revision = f" @ {last['resolved_revision']}" if last.get("resolved_revision") else ""
    where = ""
    if args.cache_dir:  # the prefetch Job: the engine reads the volume, not the registry
        target = _copy_to_cache(args, client, out, provider)
        last["path"], where = str(target), f" to {target}"
        if args.termination_log:
            _report_size(args, copy_size(target), out)
    elif args.termination_log:
        _report_size(args, int(_listing(args, client)["total_size"]), out)
    out.result({"ok": True, "strategy": "server", **last},
               f"{args.name}: DOWNLOADED{revision}{where}")  # fmt: skip
    return EXIT_OK


def _report_size(args: argparse.Namespace, size: int, out: Output) -> None:
    """``{"sizeBytes": size}`` into --termination-log, if given; a failure only warns (the
    download itself succeeded)."""
    if not args.termination_log:
        return
    try:
        Path(args.termination_log).write_text(json.dumps({"sizeBytes": size}))
    except OSError as exc:
        print(f"warning: cannot write {args.termination_log}: {exc.strerror}", file=out.stderr)


def _copy_to_cache(args: argparse.Namespace, client: MxClient, out: Output, provider: int) -> Path:
    """Stream the registry's copy into --cache-dir where DirectOnly would put it (or reuse it)."""
    target = target_dir(Path(args.cache_dir), args.name, provider)
    if complete(target, args.name, args.revision):
        return target
    listing = _listing(args, client)
    note = marker(args.name, args.revision, [(f["path"], f["size"]) for f in listing["files"]])
    with out.progress(f"{args.name} (to {target})") as sink:
        chunks = client.stream(args.name, provider, args.revision)
        write_streamed(chunks, listing, target, note)
        sink.finished()
    return target


def _listing(args: argparse.Namespace, client: MxClient) -> dict[str, Any]:
    """ListModelFiles; a model not in the cache says which command puts it there."""
    try:
        return client.list_files(args.name, PROVIDERS[args.provider], args.revision)
    except NotCachedError:
        raise NotCachedError(
            f"{args.name} is not in the registry's cache; run '{_download_command(args)}' first"
        ) from None


def _download_command(args: argparse.Namespace) -> str:
    """The ``flexinfer mx model download`` command line for the model ``args`` name."""
    words = ["flexinfer mx"]
    if args.server:
        words.append(f"--server {shlex.quote(args.server)}")
    words += ["model download", shlex.quote(args.name)]
    if args.provider != DEFAULT_PROVIDER:
        words.append(f"--provider {args.provider}")
    if args.revision:
        words.append(f"--revision {shlex.quote(args.revision)}")
    return " ".join(words)


def _validate(args: argparse.Namespace, client: MxClient, out: Output) -> int:
    """Stream every file and check offsets and sizes against the server's listing."""
    provider = PROVIDERS[args.provider]
    listing = _listing(args, client)
    expected = {f["path"]: f["size"] for f in listing["files"]}
    received: dict[str, int] = {}
    problems: list[str] = []
    for chunk in client.stream(args.name, provider, args.revision):
        done = received.get(chunk.relative_path, 0)
        if chunk.offset != done:
            problems.append(f"{chunk.relative_path}: chunk at {chunk.offset}, expected {done}")
        received[chunk.relative_path] = done + len(chunk.data)
    for path, size in sorted(expected.items()):
        if received.get(path) != size:
            problems.append(f"{path}: listed {size} bytes, streamed {received.get(path, 0)}")
    data = {
        "ok": not problems,
        "model_name": args.name,
        "files": len(expected),
        "problems": problems,
    }
    if problems:
        out.error(f"{args.name}: {len(problems)} problem(s): {problems[0]}", data)
        return EXIT_FAILED
    out.result(data, f"{args.name}: OK ({len(expected)} files, {listing['total_size']} bytes)")
    return EXIT_OK


def _list_files(args: argparse.Namespace, client: MxClient, out: Output) -> int:
    data = _listing(args, client)
    lines = [f"{f['size']:>14}  {f['path']}" for f in data["files"]]
    lines.append(f"{data['total_size']:>14}  total ({len(data['files'])} files)")
    out.result({"ok": True, **data}, "\n".join(lines))
    return EXIT_OK


def _clear(args: argparse.Namespace, client: MxClient, out: Output) -> int:
    data = client.delete(args.name, PROVIDERS[args.provider])
    if not data["success"]:
        out.error(f"{args.name}: {data['message'] or 'delete failed'}", data)
        return EXIT_FAILED
    out.result({"ok": True, **data}, f"{args.name}: cleared ({data['message']})")
    return EXIT_OK


def _health(args: argparse.Namespace, client: MxClient, out: Output) -> int:
    data = client.health()
    out.result({"ok": True, **data},
               f"{data['status']} (version {data['version']}, up {data['uptime']} s)")  # fmt: skip
    return EXIT_OK


def _ping(args: argparse.Namespace, client: MxClient, out: Output) -> int:
    reply = client.ping()
    out.result({"ok": True, "reply": reply}, reply)
    return EXIT_OK


HANDLERS: dict[str, Callable[[argparse.Namespace, MxClient, Output], int]] = {
    "health": _health,
    "ping": _ping,
    "download": _download,
    "list-files": _list_files,
    "clear": _clear,
    "validate": _validate,
}


def run(argv: list[str] | None, out: Output) -> int:
    """Parse ``argv`` and run the command, reporting through ``out``; returns the exit code."""
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        out.error(str(exc))
        return EXIT_USAGE
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    out.mode = args.output
    if getattr(args, "provider", None) == "oci" and "://" not in args.name:
        # The wire enum has no OCI value: the name's scheme is what picks the provider.
        args.name = f"oci://{args.name}"
    handler = HANDLERS[args.action if args.command == "model" else args.command]
    try:
        address = server_address(args.server)
        with MxClient(address, timeout_s=args.timeout, token=args.token) as client:
            return handler(args, client, out)
    except TlsNotSupportedError as exc:
        out.error(exc.details)
        return EXIT_USAGE
    except ServerUnreachableError as exc:
        out.error(str(exc))
        return EXIT_UNREACHABLE
    except (OperationFailedError, FlexInferError) as exc:
        out.error(str(exc))
        return EXIT_FAILED
    except OSError as exc:
        out.error(f"local I/O failed: {exc}")
        return EXIT_FAILED


def main(argv: list[str] | None = None) -> int:
    """Entry point for ``flexinfer mx``; returns the exit code (0, 1, 2 or 3)."""
    keep_large_buffers()  # streamed files arrive in 1 MiB messages
    try:
        return run(argv, Output())
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
