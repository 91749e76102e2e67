"""glibc malloc tuning: freed large buffers are reused instead of unmapped and refaulted."""

from __future__ import annotations

import subprocess
import sys

import pytest

from flexinfer_common.malloc import keep_large_buffers

# Allocates 64 x 1 MiB, frees them, allocates them again: how many page faults the second
# round took. Untuned glibc trims the freed heap, so every page faults in again.
PROBE = """
import resource, sys
from flexinfer_common.malloc import keep_large_buffers
tuned = sys.argv[1] == "tuned" and keep_large_buffers()
def round_():
    return [b"x" * (1 << 20) for _ in range(64)]
held = round_()
del held
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
held = round_()
print(int(tuned), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str, env: dict[str, str] | None = None) -> tuple[bool, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    return bool(int(out[0])), int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_tuned_process_reuses_freed_large_buffers() -> None:
    tuned, tuned_faults = _faults("tuned")
    plain_tuned, plain_faults = _faults("plain")
    assert tuned
    assert not plain_tuned
    pages = 64 * (1 << 20) // 4096
    assert plain_faults > pages // 2  # untuned: the second round faults its pages in again
    assert tuned_faults < pages // 10


def test_the_operator_s_own_glibc_settings_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert keep_large_buffers() is False
