"""Fuzz the controller's Model parser for longer than CI does, and time its worst inputs.

Runs the strategies of services/controller/tests/test_controller_documents_fuzz.py (any
bytes, near-valid JSON/YAML documents, YAML syntax soup) for ``--examples`` cases, with the
same property: only the parser's own errors, and what it accepts answers as strict JSON.
Then it times hostile 1 MiB bodies (the admin API's body limit) against parsing the valid
example document in the same run, and reports the process's peak RSS.

    python bench/fuzz_documents.py --examples 20000
"""

from __future__ import annotations

import argparse
import importlib.util
import resource
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

from hypothesis import HealthCheck, given, settings

ROOT = Path(__file__).resolve().parent.parent
FUZZ_TESTS = ROOT / "services/controller/tests/test_controller_documents_fuzz.py"
MEGABYTE = 1 << 20


def _load_strategies() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz_documents_tests", FUZZ_TESTS)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fuzz(tests: ModuleType, examples: int) -> tuple[Counter[str], list[float]]:
    """Run ``examples`` fuzz cases; outcome counts and each case's parse time (s)."""
    outcomes: Counter[str] = Counter()
    times: list[float] = []

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(tests.all_bodies())
    def run(case: tuple[bytes, str | None]) -> None:
        began = time.perf_counter()
        outcomes[tests.check_body(*case)] += 1
        times.append(time.perf_counter() - began)

    run()
    return outcomes, times


def hostile_bodies() -> dict[str, tuple[bytes, str]]:
    """1 MiB bodies shaped to cost the parsers most."""
    return {
        "YAML flow list of 512 Ki ints": (b"a: [" + b"0," * (MEGABYTE // 2) + b"0]", "yaml"),
        "YAML block list of mappings": (b"a:\n" + b"- {k: v}\n" * (MEGABYTE // 9), "yaml"),
        "YAML 1 MiB scalar": (b"a: '" + b"x" * MEGABYTE + b"'", "yaml"),
        "YAML 1 MiB of \\u escapes": (b'a: "' + b"\\u00e9" * (MEGABYTE // 6) + b'"', "yaml"),
        "YAML 1 Mi open brackets": (b"a: " + b"[" * MEGABYTE, "yaml"),
        "YAML billion laughs": (_laughs(), "yaml"),
        "JSON list of 340 Ki objects": (b'{"a": [' + b"{}," * (MEGABYTE // 3) + b"{}]}", "json"),
        "JSON 1 Mi open brackets": (b'{"a": ' + b"[" * MEGABYTE, "json"),
        "JSON 1 MiB string": (b'{"a": "' + b"x" * MEGABYTE + b'"}', "json"),
    }


def _laughs() -> bytes:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    return ("\n".join(lines) + "\n").encode()


def time_once(tests: ModuleType, body: bytes, fmt: str, repeat: int) -> tuple[float, str]:
    """Median seconds of ``repeat`` parses of ``body``, and its outcome."""
    samples, outcome = [], ""
    for _ in range(repeat):
        began = time.perf_counter()
        outcome = tests.check_body(body, fmt)
        samples.append(time.perf_counter() - began)
    return statistics.median(samples), outcome


def main(argv: list[str] | None = None) -> int:
    """Fuzz, time the hostile bodies, print a Markdown report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=5000, help="fuzz cases (default 5000)")
    parser.add_argument("--repeat", type=int, default=5, help="timings per hostile body")
    args = parser.parse_args(argv)
    tests = _load_strategies()
    rss_before = _peak_rss_mib()
    began = time.perf_counter()
    outcomes, times = fuzz(tests, args.examples)
    elapsed = time.perf_counter() - began
    times.sort()
    rss_fuzzed = _peak_rss_mib()
    print(f"fuzz: {sum(outcomes.values())} cases in {elapsed:.1f} s: {dict(outcomes)}")
    print(
        f"per case: median {statistics.median(times) * 1e3:.2f} ms, "
        f"p99 {times[int(len(times) * 0.99)] * 1e3:.2f} ms, max {times[-1] * 1e3:.2f} ms"
    )
    valid = _valid_body(tests)
    baseline, _ = time_once(tests, valid, "json", args.repeat * 20)
    print(
        f"\nbaseline: the valid Model document ({len(valid)} B) parses in {baseline * 1e3:.3f} ms"
    )
    print("\n| hostile body (1 MiB) | outcome | median ms | times the valid document |")
    print("|---|---|---|---|")
    for name, (body, fmt) in hostile_bodies().items():
        seconds, outcome = time_once(tests, body, fmt, args.repeat)
        print(f"| {name} | {outcome} | {seconds * 1e3:.1f} | {seconds / baseline:.0f} |")
    print(
        f"\npeak RSS: {rss_before:.0f} MiB before fuzzing, {rss_fuzzed:.0f} MiB after it, "
        f"{_peak_rss_mib():.0f} MiB after the hostile bodies"
    )
    return 0


def _valid_body(tests: ModuleType) -> bytes:
    import json

    valid: dict[str, Any] = tests.VALID
    return json.dumps(valid).encode()


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    sys.exit(main())
