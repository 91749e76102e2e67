"""Instructions per proxied request, counted by callgrind: our proxy against vllm-router.

bench/proxy.py measures requests per second, which on these shared 2-core machines moves
by 10-15 % from one round to the next. What a request costs in instructions does not move
with the machine's load: valgrind's callgrind counts every user-space instruction a process
runs (the kernel's are not counted), and simulates the process's own L1 caches, so the
instruction footprint of a request (I1 misses) and the data it touches (D1 misses) show
as well. The figures are deterministic to within a few per cent, so a change to the hot
path can be judged on a busy machine; what they leave out (system calls, wake-ups, other
processes evicting the caches) is what bench/proxy.py's wall-clock runs include.

Each target starts under callgrind with counting off. After a warm-up, counting is
switched on for an idle spell (the process's own timers and background work, no request),
then for the requests, on one keep-alive connection: the bench's chat completion with the
headers wrk sends. Each part is dumped on its own, and the idle part's rate, scaled to the
requests' duration, is taken off the requests' counts.

    apt-get install -y valgrind
    python bench/proxy_instructions.py [--requests 2000]
        [--targets relay-floor,flexinfer,flexinfer-compiled,vllm-router]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from keepalive_client import KeepAliveClient
from proxy import MESSAGES, Launch, Target, start_upstream, starters_by_name, stop

EVENTS = ("Ir", "I1mr", "D1mr", "D1mw")
"""Instructions, L1 instruction misses, L1 data read and write misses."""
IDLE_S = 10.0
"""How long the idle part counts: long enough to hold several of every periodic timer."""
WARM_UP = 300
"""Requests before counting: imports, caches and pools are all warm by then."""


@dataclass(frozen=True)
class Cost:
    """A target's cost per request (events as callgrind names them)."""

    name: str
    per_request: dict[str, float]
    background: float
    """Instructions per request that the idle rate accounts for (taken off already)."""


def callgrind(out: Path) -> Launch:
    """Start under callgrind, counting nothing until told to, dumping into ``out``.N."""
    prefix = ("valgrind", "--tool=callgrind", "--instr-atstart=no", "--cache-sim=yes")
    return Launch((*prefix, f"--callgrind-out-file={out}"), patience=20.0)


def control(target: Target, *args: str) -> None:
    """Tell the target's callgrind something (``-i on``, ``-d``: dump and zero)."""
    assert target.proc is not None
    subprocess.run(
        ["callgrind_control", *args, str(target.proc.pid)], check=True, capture_output=True
    )


def totals(dump: Path) -> dict[str, int]:
    """A dump's event totals."""
    names: list[str] = []
    for line in dump.read_text().splitlines():
        if line.startswith("events:"):
            names = line.split()[1:]
        elif line.startswith("totals:"):
            return dict(zip(names, map(int, line.split()[1:]), strict=True))
    raise SystemExit(f"{dump} has no totals")


def client(url: str) -> KeepAliveClient:
    """A keep-alive connection to ``url`` that sends what wrk sends."""
    parts = urlsplit(url)
    assert parts.port is not None
    headers = {"Authorization": "Bearer sk-bench"}
    return KeepAliveClient(parts.port, parts.hostname or "127.0.0.1", headers)


def send(conn: KeepAliveClient, body: bytes, count: int) -> None:
    """``count`` chat completions, each answered 200."""
    for _ in range(count):
        status, answer = conn.post("/v1/chat/completions", body)
        if status != 200:
            raise SystemExit(f"answered {status}: {answer[:200]!r}")


def measure(name: str, upstream: Target, work: Path, requests: int) -> Cost | None:
    """Start ``name`` under callgrind, count an idle spell and then ``requests``."""
    out = work / f"callgrind.{name}"
    target = starters_by_name()[name](upstream.url, work, callgrind(out))
    if target is None:
        return None
    body = json.dumps({"model": "fake", "messages": MESSAGES, "stream": False}).encode()
    try:
        warm = client(target.url)
        send(warm, body, WARM_UP)
        warm.close()
        control(target, "-i", "on")
        time.sleep(IDLE_S)  # the background alone: no request runs
        control(target, "-d")
        conn = client(target.url)  # the idle spell may have outlived the keep-alive timeout
        started = time.monotonic()
        send(conn, body, requests)
        took = time.monotonic() - started
        control(target, "-d")
        conn.close()
    finally:
        stop(target.proc)
    idle, busy = totals(Path(f"{out}.1")), totals(Path(f"{out}.2"))
    scale = took / IDLE_S
    per = {e: (busy[e] - idle[e] * scale) / requests for e in EVENTS}
    return Cost(name, per, idle["Ir"] * scale / requests)


def table(costs: list[Cost], peer: str) -> str:
    """One markdown row a target; the instruction ratio against ``peer``."""
    base = next((c.per_request["Ir"] for c in costs if c.name == peer), None)
    rows = [
        "| target | instructions / request | vs " + peer + " | I1 misses | D1 misses | "
        "background taken off |",
        "|---|---|---|---|---|---|",
    ]
    for c in costs:
        p = c.per_request
        ratio = f"{p['Ir'] / base:.2f}x" if base else "-"
        rows.append(
            f"| {c.name} | {p['Ir']:,.0f} | {ratio} | {p['I1mr']:,.0f} | "
            f"{p['D1mr'] + p['D1mw']:,.0f} | {c.background:,.0f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Parse flags, measure each target in turn, print the table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests counted a target")
    parser.add_argument("--targets", default="relay-floor,flexinfer,flexinfer-compiled,vllm-router")
    args = parser.parse_args(argv)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = set(targets) - set(starters_by_name())
    if unknown:
        parser.error(f"unknown targets: {', '.join(sorted(unknown))}")
    if args.requests < 1:
        parser.error("--requests must be at least 1")
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            print(
                f"{tool} is missing: install it with 'apt-get install -y valgrind'", file=sys.stderr
            )
            return 1
    costs: list[Cost] = []
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as tmp:
        work = Path(tmp)
        upstream = start_upstream(work)
        try:
            for name in targets:
                print(f"{name}: under callgrind ...", flush=True)
                cost = measure(name, upstream, work, args.requests)
                if cost is not None:
                    costs.append(cost)
        finally:
            stop(upstream.proc)
    print()
    print(table(costs, "vllm-router"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
