"""Proxy overhead: our proxy against LiteLLM and vllm-router, in front of one fast fake upstream.

The same wrk load (keep-alive, loopback) goes in turn to the upstream directly, to our proxy
(``flexinfer proxy --static fake=URL``), to LiteLLM's proxy and to vllm-router. The system
under test and the upstream are pinned to CPU 0 and wrk to CPU 1, so requests per second
compare cost per core. Reported: requests/s, p50/p99 latency added over the direct run at
1, 16 and 64 connections and for streaming at 16, and the proxy's CPU time per request.

    python bench/proxy.py --setup              # once: venvs for the peers in bench/.venvs/
    python bench/proxy.py [--duration 5] [--rounds 3]
                          [--targets direct,flexinfer,litellm,vllm-router]
                          [--paired]   (targets run at once, each scenario back to back)
                          (flexinfer-compiled: our proxy with its hot path compiled by
                           mypyc, after './dev compile';
                           flexinfer-uvicorn: our proxy on uvicorn's protocol, to compare;
                           relay-floor: a byte relay on uvloop, the floor of any Python proxy)
    python bench/proxy.py --streams 10000      # RSS with that many slow streams open

The peers live in their own virtual environments: their dependency sets conflict with ours,
so they never go into the project's .venv. wrk is Debian's (``apt-get install wrk``).

bench/proxy_instructions.py counts the same targets' instructions per request instead,
which a busy machine does not move.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx
import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VENVS = HERE / ".venvs"
PEERS = {
    "litellm": ["litellm[proxy]"],
    "vllm-router": ["vllm-router"],
}
SCENARIOS = [(1, False), (16, False), (64, False), (16, True)]
MESSAGES = [{"role": "user", "content": "Say hello."}]
SUT_CPU = "0"
WRK_CPU = "1"


@dataclass
class Target:
    """A running system under test: its base URL and process."""

    name: str
    url: str
    proc: subprocess.Popen[bytes] | None


@dataclass(frozen=True)
class Launch:
    """How a system under test starts: a prefix to its command (CPU pinning, a profiler),
    and a factor on the time it may take to start (valgrind runs a process 20-50x slower)."""

    prefix: tuple[str, ...] = ()
    patience: float = 1.0

    def command(self, cmd: list[str]) -> list[str]:
        """``cmd`` with the prefix."""
        return [*self.prefix, *cmd]


def pinned(cpu: str) -> Launch:
    """A launch on CPU ``cpu`` (unpinned where taskset is missing)."""
    return Launch(("taskset", "-c", cpu) if shutil.which("taskset") else ())


PINNED = pinned(SUT_CPU)
"""The throughput bench's launch: on the system-under-test CPU."""


class Starter(Protocol):
    """Starts one peer in front of the upstream at the URL (None: the peer is not set up)."""

    def __call__(self, upstream: str, work: Path, launch: Launch = PINNED) -> Target | None:
        """The running peer."""


@dataclass
class Run:
    """One wrk run's figures."""

    rps: float
    p50_us: float
    p99_us: float
    errors: int
    cpu_us_per_req: float | None


def setup() -> int:
    """Create one venv per peer under bench/.venvs/ and install it there."""
    for name, packages in PEERS.items():
        venv = VENVS / name
        if not (venv / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        print(f"installing {' '.join(packages)} into {venv}", flush=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *packages], check=True)
    return 0


def _start(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            cmd, stdout=out, stderr=out, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    """Stop a started process and its group (SIGTERM, then SIGKILL after 10 s)."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _wait_file(path: Path, proc: subprocess.Popen[bytes], what: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start")
        time.sleep(0.05)
    return path.read_text()


def _wait_serving(url: str, proc: subprocess.Popen[bytes], what: str, timeout: float) -> None:
    """Wait until a chat completion through ``url`` succeeds."""
    deadline = time.monotonic() + timeout
    body = {"model": "fake", "messages": MESSAGES}
    headers = {"Authorization": "Bearer sk-bench"}
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            answer = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers)
            if answer.status_code == 200:
                return
        time.sleep(0.25)
    raise SystemExit(f"{what} did not answer a chat completion within {timeout:.0f} s")


def start_upstream(work: Path) -> Target:
    """The fake upstream, pinned to the system-under-test CPU."""
    ready = work / "upstream.url"
    cmd = [sys.executable, str(HERE / "fake_upstream.py"), "--ready-file", str(ready)]
    proc = _start(PINNED.command(cmd), work / "upstream.log")
    url = _wait_file(ready, proc, "the fake upstream").strip()
    return Target("direct", url, proc)


def start_flexinfer_uvicorn(upstream: str, work: Path, launch: Launch = PINNED) -> Target:
    """Our proxy on uvicorn's httptools protocol instead of its own (the previous server)."""
    target = start_flexinfer(upstream, work, launch, {"FLEXINFER_PROXY_SERVER": "uvicorn"})
    target.name = "flexinfer-uvicorn"
    return target


def start_flexinfer_compiled(upstream: str, work: Path, launch: Launch = PINNED) -> Target | None:
    """Our proxy with its hot path compiled by mypyc (``./dev compile`` → build/compiled)."""
    compiled = ROOT / "build" / "compiled"
    if not (compiled / "flexinfer_proxy").is_dir():
        print("skipping flexinfer-compiled: run './dev compile' first", flush=True)
        return None
    target = start_flexinfer(upstream, work, launch, {"PYTHONPATH": str(compiled)})
    target.name = "flexinfer-compiled"
    return target


def start_flexinfer(
    upstream: str, work: Path, launch: Launch = PINNED, env_extra: dict[str, str] | None = None
) -> Target:
    """Our proxy alone: ``flexinfer proxy --static fake=URL``."""
    ready = work / "flexinfer.json"
    ready.unlink(missing_ok=True)  # a previous target's file would name a stopped proxy
    env = {**os.environ, "FLEXINFER_READY_FILE": str(ready), **(env_extra or {})}
    cmd = [sys.executable, "-m", "flexinfer_cli", "proxy", "--static", f"fake={upstream}"]
    proc = _start(launch.command([*cmd, "--port", "0"]), work / "flexinfer.log", env)
    url = json.loads(_wait_file(ready, proc, "flexinfer proxy", 60 * launch.patience))["proxy"]
    _wait_serving(url, proc, "flexinfer proxy", 30 * launch.patience)
    return Target("flexinfer", url, proc)


def start_relay_floor(upstream: str, work: Path, launch: Launch = PINNED) -> Target:
    """The floor of a Python proxy: a byte relay on uvloop (bench/relay_floor.py)."""
    ready = work / "relay.url"
    ready.unlink(missing_ok=True)
    cmd = [sys.executable, str(HERE / "relay_floor.py"), "--upstream", upstream]
    proc = _start(launch.command([*cmd, "--ready-file", str(ready)]), work / "relay.log")
    url = _wait_file(ready, proc, "the relay floor", 60 * launch.patience).strip()
    _wait_serving(url, proc, "the relay floor", 30 * launch.patience)
    return Target("relay-floor", url, proc)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_litellm(upstream: str, work: Path, launch: Launch = PINNED) -> Target | None:
    """LiteLLM's proxy, one worker, offline (local cost map, no master key)."""
    exe = VENVS / "litellm" / "bin" / "litellm"
    if not exe.exists():
        print("skipping litellm: run 'python bench/proxy.py --setup' first", flush=True)
        return None
    config = work / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        "  - model_name: fake\n"
        "    litellm_params:\n"
        "      model: openai/fake\n"
        f"      api_base: {upstream}/v1\n"
        "      api_key: sk-fake\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
        "general_settings:\n"
        "  dangerously_permit_weak_or_unset_master_key: true\n"
    )
    port = _free_port()
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False"}
    cmd = [str(exe), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    proc = _start(launch.command([*cmd, "--num_workers", "1"]), work / "litellm.log", env)
    url = f"http://127.0.0.1:{port}"
    _wait_serving(url, proc, "litellm", 180 * launch.patience)
    return Target("litellm", url, proc)


def start_vllm_router(upstream: str, work: Path, launch: Launch = PINNED) -> Target | None:
    """vllm-router with one worker, round robin."""
    exe = VENVS / "vllm-router" / "bin" / "vllm-router"
    if not exe.exists():
        print("skipping vllm-router: run 'python bench/proxy.py --setup' first", flush=True)
        return None
    port = _free_port()
    cmd = [str(exe), "--worker-urls", upstream, "--policy", "round_robin"]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    # Its metrics listener defaults to a fixed port (29000): give it a free one.
    cmd += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(_free_port())]
    proc = _start(launch.command(cmd), work / "vllm-router.log")
    url = f"http://127.0.0.1:{port}"
    _wait_serving(url, proc, "vllm-router", 60 * launch.patience)
    return Target("vllm-router", url, proc)


LUA = """
wrk.method = "POST"
wrk.body = '%s'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer sk-bench"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH {\\"requests\\":%%d,\\"duration_us\\":%%d,\\"p50_us\\":%%d,\\"p99_us\\":%%d," ..
    "\\"errors\\":%%d}\\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.status + e.timeout))
end
"""


def write_lua(work: Path, stream: bool) -> Path:
    """The wrk script that POSTs one chat completion (streaming or not)."""
    body = json.dumps({"model": "fake", "messages": MESSAGES, "stream": stream})
    path = work / f"chat-{'stream' if stream else 'json'}.lua"
    path.write_text(LUA % body)
    return path


def cpu_seconds(pid: int) -> float:
    """utime+stime of ``pid`` and its descendants, from /proc/<pid>/stat."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pids = [pid]
    with contextlib.suppress(psutil.Error):
        pids += [c.pid for c in psutil.Process(pid).children(recursive=True)]
    for each in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def wrk(url: str, lua: Path, conns: int, duration: float, pid: int | None) -> Run:
    """One pinned wrk run against ``url``; CPU per request of ``pid`` when given."""
    cmd = ["wrk", "-t1", f"-c{conns}", f"-d{duration:g}s", "--timeout", "10s", "-s", str(lua)]
    before = cpu_seconds(pid) if pid else 0.0
    out = subprocess.run(
        pinned(WRK_CPU).command([*cmd, f"{url}/v1/chat/completions"]),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    after = cpu_seconds(pid) if pid else 0.0
    line = next(li for li in out.splitlines() if li.startswith("BENCH "))
    stats = json.loads(line[len("BENCH ") :])
    requests = max(1, stats["requests"])
    cpu = (after - before) / requests * 1e6 if pid else None
    return Run(
        rps=stats["requests"] / (stats["duration_us"] / 1e6),
        p50_us=stats["p50_us"],
        p99_us=stats["p99_us"],
        errors=stats["errors"],
        cpu_us_per_req=cpu,
    )


def measure_one(target: Target, work: Path, duration: float, conns: int, stream: bool) -> Run:
    """One scenario against ``target`` (1 s warm-up first), printed as it ends."""
    pid = target.proc.pid if target.proc else None
    lua = write_lua(work, stream)
    wrk(target.url, lua, conns, 1, None)
    run = wrk(target.url, lua, conns, duration, pid)
    print(
        f"  {target.name:<12} c={conns:<3} {'stream' if stream else 'json  '} "
        f"{run.rps:>9.0f} req/s  p50 {run.p50_us / 1000:6.2f} ms  "
        f"p99 {run.p99_us / 1000:6.2f} ms  errors {run.errors}"
        + (f"  cpu {run.cpu_us_per_req:.0f} us/req" if run.cpu_us_per_req else ""),
        flush=True,
    )
    return run


def measure(target: Target, work: Path, duration: float) -> dict[tuple[int, bool], Run]:
    """Every scenario against ``target``."""
    return {
        (conns, stream): measure_one(target, work, duration, conns, stream)
        for conns, stream in SCENARIOS
    }


def table(all_runs: dict[str, dict[tuple[int, bool], Run]]) -> str:
    """A Markdown table: req/s and latency added over the direct run."""
    direct = all_runs.get("direct", {})
    lines = [
        "| target | load | req/s | added p50 (ms) | added p99 (ms) | CPU/req (µs) | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, runs in all_runs.items():
        for (conns, stream), run in runs.items():
            base = direct.get((conns, stream))
            add50 = f"{(run.p50_us - base.p50_us) / 1000:+.2f}" if base and name != "direct" else ""
            add99 = f"{(run.p99_us - base.p99_us) / 1000:+.2f}" if base and name != "direct" else ""
            cpu = f"{run.cpu_us_per_req:.0f}" if run.cpu_us_per_req is not None else ""
            load = f"{conns} conns{' stream' if stream else ''}"
            lines.append(
                f"| {name} | {load} | {run.rps:.0f} | {add50} | {add99} | {cpu} | {run.errors} |"
            )
    return "\n".join(lines)


def median_run(runs: list[Run]) -> Run:
    """Each figure's median over rounds (so one noisy round does not decide a cell)."""
    cpus = [r.cpu_us_per_req for r in runs if r.cpu_us_per_req is not None]
    return Run(
        rps=statistics.median(r.rps for r in runs),
        p50_us=statistics.median(r.p50_us for r in runs),
        p99_us=statistics.median(r.p99_us for r in runs),
        errors=sum(r.errors for r in runs),
        cpu_us_per_req=statistics.median(cpus) if cpus else None,
    )


def ratios(rounds: list[dict[str, dict[tuple[int, bool], Run]]], ours: str, peer: str) -> str:
    """req/s of ``ours`` over ``peer`` per scenario: each round's ratio, and their median."""
    lines = []
    for conns, stream in SCENARIOS:
        each = [
            r[ours][(conns, stream)].rps / r[peer][(conns, stream)].rps
            for r in rounds
            if ours in r and peer in r
        ]
        if each:
            listed = ", ".join(f"{x:.2f}" for x in each)
            load = f"{conns} conns{' stream' if stream else ''}"
            lines.append(
                f"- {load}: {ours}/{peer} = {statistics.median(each):.2f}x (rounds: {listed})"
            )
    return "\n".join(lines)


def starters_by_name() -> dict[str, Starter]:
    """Every target but ``direct`` (the upstream itself), by name."""
    return {
        "flexinfer": start_flexinfer,
        "flexinfer-compiled": start_flexinfer_compiled,
        "flexinfer-uvicorn": start_flexinfer_uvicorn,
        "litellm": start_litellm,
        "relay-floor": start_relay_floor,
        "vllm-router": start_vllm_router,
    }


def bench(targets: list[str], duration: float, rounds: int, paired: bool = False) -> int:
    """Start the upstream, then each target in turn, ``rounds`` times; print the table.

    Cells are medians over rounds; ``paired`` chooses how a round measures its targets.
    """
    if shutil.which("wrk") is None:
        print("wrk is missing: install it with 'apt-get install -y wrk'", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="bench-proxy-") as tmp:
        work = Path(tmp)
        upstream = start_upstream(work)
        starters = starters_by_name()
        rounds_of = _paired_rounds if paired else _interleaved_rounds
        try:
            each_round = rounds_of(targets, upstream, starters, work, duration, rounds)
        finally:
            stop(upstream.proc)
    medians = {
        name: {s: median_run([r[name][s] for r in each_round]) for s in runs}
        for name, runs in each_round[0].items()
    }
    print()
    print(table(medians))
    for ours in ("flexinfer", "flexinfer-compiled"):
        if ours in medians and "vllm-router" in medians:
            print()
            print(ratios(each_round, ours, "vllm-router"))
    return 0


Rounds = list[dict[str, dict[tuple[int, bool], Run]]]


def _interleaved_rounds(
    targets: list[str],
    upstream: Target,
    starters: Mapping[str, Starter],
    work: Path,
    duration: float,
    rounds: int,
) -> Rounds:
    """Each round starts every target in turn and measures all its scenarios.

    Rounds interleave the targets (A, B, A, B), so a change in the machine's load over a
    run affects every target alike.
    """
    each_round: Rounds = []
    for number in range(rounds):
        print(f"round {number + 1} of {rounds}", flush=True)
        runs: dict[str, dict[tuple[int, bool], Run]] = {}
        for name in targets:
            target = upstream if name == "direct" else starters[name](upstream.url, work)
            if target is None:
                continue
            try:
                runs[name] = measure(target, work, duration)
            finally:
                if target is not upstream:
                    stop(target.proc)
        each_round.append(runs)
    return each_round


def _paired_rounds(
    targets: list[str],
    upstream: Target,
    starters: Mapping[str, Starter],
    work: Path,
    duration: float,
    rounds: int,
) -> Rounds:
    """Every target running at once; each scenario measured on each target back to back.

    On a shared host whose load swings within seconds, the interleaved rounds above put
    about four wrk runs between the two measurements a ratio compares. Here the targets
    are started once (an idle one costs no CPU) and a scenario's runs follow each other,
    the order reversed every round, so each ratio compares measurements seconds apart.
    """
    running: list[Target] = []
    try:
        for name in targets:
            target = upstream if name == "direct" else starters[name](upstream.url, work)
            if target is not None:
                running.append(target)
        each_round: Rounds = []
        for number in range(rounds):
            print(f"round {number + 1} of {rounds} (paired)", flush=True)
            runs: dict[str, dict[tuple[int, bool], Run]] = {t.name: {} for t in running}
            order = running if number % 2 == 0 else running[::-1]
            for conns, stream in SCENARIOS:
                for target in order:
                    run = measure_one(target, work, duration, conns, stream)
                    runs[target.name][(conns, stream)] = run
            each_round.append({t.name: runs[t.name] for t in running})
        return each_round
    finally:
        for target in running:
            if target is not upstream:
                stop(target.proc)


@dataclass
class _Stream:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    task: asyncio.Task[None] | None = None


async def _open_stream(host: str, port: int, delay_ms: int) -> _Stream:
    reader, writer = await asyncio.open_connection(host, port)
    body = json.dumps({"model": "fake", "messages": MESSAGES, "stream": True}).encode()
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
        b"x-fake-delay-ms: %d\r\ncontent-length: %d\r\n\r\n%s" % (delay_ms, len(body), body)
    )
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"stream refused: {head[:60]!r}")
    await reader.readuntil(b"\n\n")  # the first event: the stream is open end to end
    return _Stream(reader, writer)


async def _drain(stream: _Stream) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while await stream.reader.read(65536):
            pass


def _rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


async def _hold_streams(url: str, pid: int, count: int, step: int) -> list[tuple[int, float]]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    # Each stream lasts 8 chunks x delay: long enough to have them all open at once.
    delay_ms = max(2000, count // 2)
    points = [(0, _rss_mb(pid))]
    streams: list[_Stream] = []
    try:
        while len(streams) < count:
            batch = min(step, count - len(streams))
            opened = await asyncio.gather(
                *(_open_stream(host, int(port), delay_ms) for _ in range(batch))
            )
            for stream in opened:
                stream.task = asyncio.create_task(_drain(stream))
            streams += opened
            points.append((len(streams), _rss_mb(pid)))
            print(f"  {len(streams):>6} streams open: proxy RSS {points[-1][1]:.1f} MB", flush=True)
    finally:
        for stream in streams:
            stream.writer.close()
            if stream.task is not None:
                stream.task.cancel()
        await asyncio.gather(*(s.task for s in streams if s.task), return_exceptions=True)
    return points


def streams_mode(count: int) -> int:
    """Open ``count`` slow streams through our proxy; report its RSS per 1,000 streams."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    # The proxy holds two sockets per stream (client and upstream) in one process.
    fit = (hard - 200) // 2
    if count > fit:
        print(f"note: the open-files limit ({hard}) fits {fit} streams; opening {fit}")
        count = fit
    with tempfile.TemporaryDirectory(prefix="bench-proxy-") as tmp:
        work = Path(tmp)
        upstream = start_upstream(work)
        env = {"FLEXINFER_PROXY_MAX_CONNECTIONS": str(count + 100)}
        try:
            proxy = start_flexinfer(upstream.url, work, env_extra=env)
            assert proxy.proc is not None
            try:
                points = asyncio.run(_hold_streams(proxy.url, proxy.proc.pid, count, 1000))
                time.sleep(1)
                after = _rss_mb(proxy.proc.pid)
            finally:
                stop(proxy.proc)
        finally:
            stop(upstream.proc)
    (n0, r0), (n1, r1) = points[1], points[-1]
    per_k = (r1 - r0) / max(1, n1 - n0) * 1000
    print(
        f"\nidle RSS {points[0][1]:.1f} MB; with {n1} streams {r1:.1f} MB; after close {after:.1f}"
    )
    print(f"RSS per 1,000 open streams: {per_k:.2f} MB (between {n0} and {n1} streams)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse flags; set up the peers, run the throughput bench, or the streams bench."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--setup", action="store_true", help="create the peers' venvs")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run")
    parser.add_argument(
        "--rounds", type=int, default=1, help="repeat every target this many times, interleaved"
    )
    parser.add_argument("--targets", default="direct,flexinfer,litellm,vllm-router")
    parser.add_argument("--streams", type=int, help="memory mode: open this many slow streams")
    parser.add_argument(
        "--paired",
        action="store_true",
        help="run every target at once and measure each scenario on each back to back",
    )
    args = parser.parse_args(argv)
    if args.setup:
        return setup()
    if args.streams:
        return streams_mode(args.streams)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = set(targets) - {"direct", *starters_by_name()}
    if unknown:
        parser.error(f"unknown targets: {', '.join(sorted(unknown))}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return bench(targets, args.duration, args.rounds, args.paired)


if __name__ == "__main__":
    sys.exit(main())
