"""``flexinfer bench tps``: the seed's flexinfer-bench, measuring a running engine's tokens/s.

It finds the Model (``--runtime local``: the controller's admin API; ``kubernetes``: the
apiserver), sends ``--runs`` completions of ``--max-tokens`` tokens each (``ignore_eos``,
after one warm-up) to the endpoint serving it, and takes the median of completion tokens
per second of wall time. The result goes where the placement core's TPS lookup reads it,
keyed by ``benchmark_key(backend, model, deviceClass)``: the global
``flexinfer-benchmark-results`` ConfigMap of the namespace on Kubernetes, the controller's
benchmark table (its SQL store) in local mode. The device class is that of the node the
Model runs on, as placement sees it (``--device-class`` overrides).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from flexinfer_cli.args import subcommands
from flexinfer_cli.resources.client import ResourceClient, add_connection_arguments, connect
from flexinfer_cli.resources.errors import EXIT_API, CliError, usage_error
from flexinfer_cli.resources.kinds import MODEL
from flexinfer_common.backends import alias_table

DESCRIPTION = (
    "Measure the tokens per second of the engine serving a Model (one warm-up, then the "
    "median of --runs completions of --max-tokens tokens) and store it where placement's "
    "TPS score reads it, keyed by backend, model and the device class of the node the "
    "Model runs on: the controller's benchmark table with --runtime local, the global "
    "benchmark ConfigMap of the namespace with --runtime kubernetes."
)

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
"""A prompt any text model continues; with ``ignore_eos`` its length hardly matters."""


@dataclass(frozen=True, slots=True)
class Measurement:
    """Tokens per second of each timed run, and their median."""

    runs: list[float]
    tokens: int
    """Completion tokens of the last run."""

    @property
    def tokens_per_second(self) -> float:
        """The median of the runs."""
        return statistics.median(self.runs)


def _parser() -> argparse.ArgumentParser:
    top, commands = subcommands("bench", "Benchmarks that feed placement.")
    tps = commands.add_parser(
        "tps",
        help="measure a Model's tokens/s and store it for the scheduler's TPS score",
        description=DESCRIPTION,
    )
    tps.add_argument("--model", required=True, help="the Model's name")
    tps.add_argument("--url", help="the endpoint to measure (default: the Model's status)")
    tps.add_argument("--device-class", help="key the result by this device class")
    tps.add_argument("--max-tokens", type=int, default=128, help="tokens per run (128)")
    tps.add_argument("--runs", type=int, default=3, help="timed runs, median taken (3)")
    tps.add_argument("--prompt", default=PROMPT, help="the prompt sent")
    tps.add_argument("--timeout", type=float, default=300.0, help="seconds per request (300)")
    tps.add_argument("--dry-run", action="store_true", help="measure and print; store nothing")
    add_connection_arguments(tps)
    return top


def _check(args: argparse.Namespace) -> None:
    if not 1 <= args.max_tokens <= 65536:
        raise usage_error("--max-tokens must be between 1 and 65536")
    if not 1 <= args.runs <= 100:
        raise usage_error("--runs must be between 1 and 100")
    if args.timeout <= 0:
        raise usage_error("--timeout must be positive")
    values = (args.model, args.prompt, args.device_class or "", args.url or "")
    if any(ord(c) < 32 and c not in "\n\t" for value in values for c in value):
        raise usage_error("arguments must not contain control characters")


def served_name(http: httpx.Client, url: str) -> str:
    """The model id the endpoint serves (``GET /v1/models``: the first)."""
    listing = _call(http, "GET", f"{url}/v1/models").json()
    data = listing.get("data") if isinstance(listing, dict) else None
    if not data or not isinstance(data[0], dict) or not data[0].get("id"):
        raise CliError(f"{url}/v1/models lists no model", EXIT_API)
    return str(data[0]["id"])


def _call(http: httpx.Client, method: str, url: str, **kwargs: Any) -> httpx.Response:
    try:
        response = http.request(method, url, **kwargs)
    except httpx.HTTPError as exc:
        raise usage_error(f"cannot reach the engine at {url}: {exc}") from exc
    if response.status_code != 200:
        raise CliError(f"{url} answered {response.status_code}: {response.text[:200]}", EXIT_API)
    return response


def measure(url: str, *, max_tokens: int, runs: int, prompt: str, timeout_s: float) -> Measurement:
    """One warm-up completion, then ``runs`` timed ones: completion tokens per second."""
    with httpx.Client(timeout=timeout_s, trust_env=False) as http:
        body = {
            "model": served_name(http, url),
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": False,
        }
        _call(http, "POST", f"{url}/v1/completions", json=body)  # load, compile, cache
        rates, tokens = [], 0
        for _ in range(runs):
            started = time.perf_counter()
            answer = _call(http, "POST", f"{url}/v1/completions", json=body).json()
            took = time.perf_counter() - started
            tokens = int((answer.get("usage") or {}).get("completion_tokens") or 0)
            if tokens <= 0:
                raise CliError(f"{url} reported no completion tokens", EXIT_API)
            rates.append(tokens / took)
    return Measurement(rates, tokens)


def _endpoint(model: dict[str, Any], url: str | None) -> str:
    if url:
        return url.rstrip("/")
    endpoint = (model.get("status") or {}).get("endpoint")
    if not endpoint:
        name = model["metadata"]["name"]
        raise usage_error(f"model {name} has no ready endpoint (is it Ready?); pass --url")
    return str(endpoint).rstrip("/").removesuffix("/v1")


def run_tps(args: argparse.Namespace, client: ResourceClient) -> int:
    """Measure and store; one line saying what and where."""
    model = client.get(MODEL, args.namespace, args.model)
    namespace = model["metadata"].get("namespace") or args.namespace
    backend = str(model.get("spec", {}).get("backend", "")).lower()
    backend = alias_table().get(backend, backend)
    device_class = args.device_class
    if device_class is None:
        device_class = client.node_device_class(namespace, model)
    if device_class is None:
        raise usage_error(
            f"model {args.model} runs on no GPU node placement knows; pass --device-class"
        )
    url = _endpoint(model, args.url)
    result = measure(
        url,
        max_tokens=args.max_tokens,
        runs=args.runs,
        prompt=args.prompt,
        timeout_s=args.timeout,
    )
    tps = round(result.tokens_per_second, 2)
    what = f"{namespace}/{args.model} ({backend}) on {device_class or '(no GPU)'}: {tps} tokens/s"
    detail = f"median of {args.runs} runs of {result.tokens} tokens at {url}"
    if args.dry_run:
        print(f"{what}, {detail}")
        return 0
    record = {
        "backend": backend,
        "model": args.model,
        "deviceClass": device_class,
        "tokensPerSecond": tps,
        "measuredAt": datetime.now(UTC).isoformat(),
    }
    where = client.put_benchmark(namespace, record)
    print(f"{what}, {detail}; stored in {where}")
    return 0


def main(argv: list[str]) -> int:
    """``flexinfer bench tps ...``."""
    args = _parser().parse_args(argv)
    try:
        _check(args)
        client = connect(args)
        try:
            return run_tps(args, client)
        finally:
            client.close()
    except CliError as exc:
        print(f"flexinfer bench {args.command}: {exc}", file=sys.stderr)
        return exc.code
