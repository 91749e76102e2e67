"""Process timing: when did this process start, per the OS."""

from __future__ import annotations

import time

import psutil


def process_create_time() -> float:
    """Epoch seconds at which the OS created this process (falls back to now)."""
    try:
        return float(psutil.Process().create_time())
    except (psutil.Error, OSError):
        return time.time()
