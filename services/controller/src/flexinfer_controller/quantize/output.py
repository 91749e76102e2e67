"""The output directory appears whole or not at all, and says what it was made from.

A conversion writes into a hidden sibling (``.<name>.tmp-<random>``), then a completion
marker into it, then renames it to the output: a killed run leaves only the hidden
directory, which the next run removes. An output whose marker records the same request
is reused; one made from something else is replaced (the new one renamed in first).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from flexinfer_controller.quantize.request import QuantizeRequest

MARKER = ".flexinfer-quantized.json"
"""Written last, inside the staged output: its presence means the output is complete."""


def marker(request: QuantizeRequest) -> dict[str, object]:
    """What the marker records."""
    return {
        "format": request.format,
        "input": str(request.input),
        "options": dict(sorted(request.options.items())),
        "digest": request.digest(),
    }


def is_complete(request: QuantizeRequest) -> bool:
    """Whether ``request.output`` holds a finished conversion of this very request."""
    try:
        recorded = json.loads((request.output / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(recorded, dict) and recorded.get("digest") == request.digest()


def remove_leftovers(output: Path) -> None:
    """Delete what killed runs left beside ``output`` (staging and replaced directories)."""
    if not output.parent.is_dir():
        return
    for item in output.parent.glob(f".{output.name}.*-*"):
        if item.name.startswith((f".{output.name}.tmp-", f".{output.name}.old-")):
            shutil.rmtree(item, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_tree(root: Path) -> None:
    """Flush every file's data before the rename makes the directory visible."""
    for item in root.rglob("*"):
        if item.is_file() and not item.is_symlink():
            with item.open("rb+") as fh:
                os.fsync(fh.fileno())
    _fsync_dir(root)


@contextmanager
def staged(request: QuantizeRequest) -> Iterator[Path]:
    """A fresh directory to write into; renamed to the output when the block succeeds."""
    output = request.output
    output.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(4)
    staging = output.parent / f".{output.name}.tmp-{token}"
    staging.mkdir()
    try:
        yield staging
        (staging / MARKER).write_text(json.dumps(marker(request), indent=2) + "\n")
        _sync_tree(staging)
        _publish(staging, output, token)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _publish(staging: Path, output: Path, token: str) -> None:
    old = output.parent / f".{output.name}.old-{token}"
    if output.exists() or output.is_symlink():
        output.rename(old)  # the stale output steps aside; the new one takes its name
    staging.rename(output)
    _fsync_dir(output.parent)
    if old.exists():
        shutil.rmtree(old, ignore_errors=True)
