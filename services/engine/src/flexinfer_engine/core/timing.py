"""Process timing: when did this process start, per the OS."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil


def process_create_time() -> float:
    """Epoch seconds at which the OS created this process (falls back to now).

    On Linux the process age comes from /proc/self/stat against /proc/uptime, both in clock
    ticks (10 ms). psutil's create_time adds the age to the boot time, which the kernel
    reports in whole seconds: up to a second off, more than the activation overhead we
    measure with it.
    """
    try:
        return time.time() - _linux_process_age()
    except (OSError, ValueError, IndexError):
        pass
    try:
        return float(psutil.Process().create_time())
    except (psutil.Error, OSError):
        return time.time()


def _linux_process_age() -> float:
    stat = Path("/proc/self/stat").read_text()
    # Field 22 (starttime) counts from after the ')' that closes the command name.
    fields = stat[stat.rindex(")") + 2 :].split()
    start_ticks = int(fields[19])
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
