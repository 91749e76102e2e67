"""The loader peers of bench/transfer.py, run in their own venv: runai-model-streamer and
fastsafetensors.

Their dependency sets are not the project's (and fastsafetensors or runai-model-streamer
installed next to libs/transfer would be picked by the strategy chain itself), so they live
in ``bench/.venvs/transfer-peers`` (``python bench/transfer.py --setup``) and this file runs
there as a worker. It prints ``{"ready": true}`` once the peers are imported, then takes
one JSON request per line on stdin (``{"peer": NAME, "files": [...]}``) and answers each
with one JSON line on stdout (``{"bytes": N, "seconds": S}`` or ``{"error": TEXT}``).
Each load is timed here, around the peer's own calls only, and freed before the answer, so
neither the pipe nor the unmapping lands inside a measurement. The bench starts a fresh
worker for every load: a worker that lived on reused the memory of its earlier loads (5k
page faults a load instead of 303k), which no engine loading its model once gets.

"Loaded" means what it means for every contender of bench/transfer.py: every tensor in
private memory and touched. Both peers read into buffers they own (runai's ``owned=True``
tensors, fastsafetensors' host buffer), so no clone is added.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import sys
import time
from collections.abc import Callable

Load = Callable[[list[str]], tuple[int, object]]

RUNAI_TUNED = {"RUNAI_STREAMER_FS_STRATEGY": "sync_buffered", "RUNAI_STREAMER_CONCURRENCY": "2"}
"""The best setting measured here for a local page-cached file (issue 14's baseline)."""
RUNAI_KEYS = ("RUNAI_STREAMER_FS_STRATEGY", "RUNAI_STREAMER_CONCURRENCY")


def _runai(env: dict[str, str]) -> Load:
    def load(files: list[str]) -> tuple[int, object]:
        from runai_model_streamer import SafetensorsStreamer

        for key in RUNAI_KEYS:  # the library reads them when a streamer starts
            os.environ.pop(key, None)
        os.environ.update(env)
        kept = []
        with SafetensorsStreamer() as streamer:
            streamer.stream_files(files, owned=True)
            kept = [tensor for _, tensor in streamer.get_tensors()]
        return sum(t.numel() * t.element_size() for t in kept), kept

    return load


def _fastsafetensors(files: list[str]) -> tuple[int, object]:
    # Buffered reads: O_DIRECT bypasses the page cache, which a warm run is about.
    os.environ["FASTSAFETENSORS_ODIRECT"] = "0"
    from fastsafetensors import fastsafe_open

    with fastsafe_open(filenames=files, nogds=True, device="cpu") as opened:
        names = opened.keys()  # a method of fastsafe_open, which is not iterable itself
        kept = [opened.get_tensor(name) for name in names]
    return sum(t.numel() * t.element_size() for t in kept), kept


PEERS: dict[str, Load] = {
    "runai": _runai({}),
    "runai-tuned": _runai(RUNAI_TUNED),
    "fastsafetensors": _fastsafetensors,
}


def preload() -> None:
    """Import the peers before the first request, so that no load times an import (the
    bench starts a fresh worker for every load)."""
    os.environ["FASTSAFETENSORS_ODIRECT"] = "0"
    for module in ("runai_model_streamer", "fastsafetensors"):
        try:
            __import__(module)
        except ImportError:
            continue  # its load answers with the error


def serve() -> None:
    """Answer load requests until stdin closes."""
    preload()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            gc.collect()
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            started = time.perf_counter()
            nbytes, kept = PEERS[request["peer"]](request["files"])
            seconds = time.perf_counter() - started
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
            del kept
            gc.collect()
            answer: dict[str, object] = {"bytes": nbytes, "seconds": seconds, "faults": faults}
        except Exception as exc:  # reported to the bench, which prints it and goes on
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    serve()
