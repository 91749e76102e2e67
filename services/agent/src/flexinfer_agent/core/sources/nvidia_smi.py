"""``nvidia-smi``: the CSV query, plus ``nvidia-smi -L`` for MIG instances.

The query asks for exactly the fields the labels need, without units or a header:

    nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.free,compute_cap,mig.mode.current
               --format=csv,noheader,nounits

which prints one line per GPU, e.g. ``0, GPU-7c9e…, NVIDIA H100 80GB HBM3, 81559, 81004, 9.0,
Disabled`` (memory in MiB; ``[N/A]`` where a GPU has no MIG). ``compute_cap`` needs a driver
from 2022 (510) or newer; an older one refuses the field, and discovery falls through.

A GPU in MIG mode is not allocatable as a whole: the device plugin hands out its instances.
They are listed only by ``nvidia-smi -L`` (``  MIG 3g.40gb     Device  0: (UUID: MIG-…)``
under their parent's ``GPU 0: …`` line), and replace their parent here. Their memory is the
profile's nominal size; how much of it is free ``-L`` does not say.
"""

from __future__ import annotations

import re
from dataclasses import replace

from flexinfer_agent.core.commands import BadOutputError, run_tool
from flexinfer_agent.core.gpu import GPU, Vendor, nvidia_arch
from flexinfer_agent.core.sources.base import GPUSource, integer
from flexinfer_agent.settings import DiscoverySettings

FIELDS = ("index", "uuid", "name", "memory.total", "memory.free", "compute_cap", "mig.mode.current")
QUERY = (f"--query-gpu={','.join(FIELDS)}", "--format=csv,noheader,nounits")
LIST = ("-L",)
NAME = "nvidia-smi"

_GPU_LINE = re.compile(r"^GPU (\d+): .*\(UUID: (GPU-[^)]+)\)\s*$")
_MIG_LINE = re.compile(r"^\s+MIG (\d+g\.(\d+)gb)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)\s*$")


def _optional_int(value: str, what: str) -> int | None:
    # A GPU in a bad state reports "[N/A]" or "[Unknown Error]" for a field.
    return None if value.startswith("[") else integer(value, what, NAME)


def parse_query(text: str) -> list[tuple[GPU, bool]]:
    """The GPUs of the CSV query's output, each with whether it has MIG enabled."""
    gpus = []
    for line in filter(None, (raw.strip() for raw in text.splitlines())):
        cells = [cell.strip() for cell in line.split(", ")]
        if len(cells) != len(FIELDS):
            raise BadOutputError(f"{NAME}: expected {len(FIELDS)} fields, got: {line[:120]!r}")
        index, uuid, name, total, free, cap, mig = cells
        try:
            arch = nvidia_arch(cap)
        except ValueError:
            arch = None
        gpu = GPU(
            vendor=Vendor.NVIDIA,
            name=name,
            index=integer(index, "index", NAME),
            source=NAME,
            uuid=uuid,
            memory_total_mib=_optional_int(total, "memory.total"),
            memory_free_mib=_optional_int(free, "memory.free"),
            arch=arch,
        )
        gpus.append((gpu, mig == "Enabled"))
    return gpus


def parse_mig_list(text: str) -> dict[str, list[tuple[str, int, str]]]:
    """``nvidia-smi -L``: parent GPU UUID → its MIG instances (profile, GiB, UUID)."""
    instances: dict[str, list[tuple[str, int, str]]] = {}
    parent: str | None = None
    for line in text.splitlines():
        if gpu := _GPU_LINE.match(line):
            parent = gpu.group(2)
            instances[parent] = []
        elif (mig := _MIG_LINE.match(line)) and parent is not None:
            instances[parent].append((mig.group(1), int(mig.group(2)), mig.group(4)))
    return instances


def expand_mig(
    gpus: list[tuple[GPU, bool]], instances: dict[str, list[tuple[str, int, str]]]
) -> list[GPU]:
    """Each MIG-enabled GPU replaced by its instances (none created: it offers nothing)."""
    result = []
    for gpu, mig_enabled in gpus:
        if not mig_enabled:
            result.append(gpu)
            continue
        for profile, gib, uuid in instances.get(gpu.uuid or "", []):
            result.append(
                replace(
                    gpu,
                    uuid=uuid,
                    memory_total_mib=gib * 1024,
                    memory_free_mib=None,
                    mig_profile=profile,
                )
            )
    return result


class NvidiaSmiSource:
    """GPUs from ``nvidia-smi``'s CSV query (and ``-L`` when MIG is on)."""

    def __init__(self, settings: DiscoverySettings) -> None:
        self._tool = settings.nvidia_smi
        self._timeout_s = settings.timeout_s

    async def discover(self) -> list[GPU]:
        """Every GPU, MIG instances in place of their parents."""
        gpus = parse_query(await run_tool([self._tool, *QUERY], self._timeout_s))
        if not any(mig_enabled for _, mig_enabled in gpus):
            return [gpu for gpu, _ in gpus]
        listing = await run_tool([self._tool, *LIST], self._timeout_s)
        return expand_mig(gpus, parse_mig_list(listing))


def nvidia_smi_source(settings: DiscoverySettings) -> GPUSource:
    """The ``nvidia-smi`` source."""
    return NvidiaSmiSource(settings)
