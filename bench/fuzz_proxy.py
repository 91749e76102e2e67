"""The proxy's fuzz properties (services/proxy/tests/test_proxy_fuzz.py), run longer.

CI runs each property with 300 examples; this runs them with ``--examples`` each and prints
how many inputs were tried per second, for bench/RESULTS.md.

    python bench/fuzz_proxy.py [--examples 20000]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time
from pathlib import Path
from types import ModuleType

TESTS = Path(__file__).resolve().parent.parent / "services/proxy/tests/test_proxy_fuzz.py"


def load() -> ModuleType:
    """The test module, imported from its path (tests are not a package)."""
    spec = importlib.util.spec_from_file_location("test_proxy_fuzz", TESTS)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    """Run every property with the given number of examples."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--examples", type=int, default=20000)
    args = parser.parse_args()
    os.environ["FLEXINFER_FUZZ_EXAMPLES"] = str(args.examples)  # read when the module loads
    module = load()
    for name in sorted(n for n in dir(module) if n.startswith("test_")):
        started = time.monotonic()
        getattr(module, name)()
        took = time.monotonic() - started
        print(f"{name}: {args.examples} examples in {took:.1f} s, no failure", flush=True)


if __name__ == "__main__":
    main()
