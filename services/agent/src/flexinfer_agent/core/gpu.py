"""What the agent knows about one accelerator, whichever tool reported it.

A ``GPU`` is one *allocatable* device: a whole GPU, or one MIG instance of a GPU in MIG
mode (the device plugin hands those out instead of the parent). Every source maps its
tool's output onto this shape, so labels, metrics and the bus event never depend on which
tool answered.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

MAX_LABEL_VALUE = 63
"""Kubernetes caps a label value at 63 characters."""


class Vendor(StrEnum):
    """Upper case, as the agent's ``flexinfer.ai/gpu.vendor`` label spells it."""

    NVIDIA = "NVIDIA"
    AMD = "AMD"
    INTEL = "INTEL"
    APPLE = "APPLE"


@dataclass(frozen=True, slots=True)
class GPU:
    """One allocatable accelerator."""

    vendor: Vendor
    name: str
    """The model name as the tool reports it (``NVIDIA H100 80GB HBM3``)."""
    index: int
    """The tool's index (a MIG instance: its parent's index)."""
    source: str
    """The discovery source that reported it (``nvidia-smi``, ``rocm-smi``, ...)."""
    uuid: str | None = None
    memory_total_mib: int | None = None
    memory_free_mib: int | None = None
    """None when the tool does not say (a MIG instance from ``nvidia-smi -L``, Apple)."""
    arch: str | None = None
    """``sm_89`` (NVIDIA compute capability), ``gfx942`` (AMD), ``pvc`` (Intel), ``metal3``."""
    mig_profile: str | None = None
    """The MIG profile (``3g.40gb``) when this is a MIG instance."""

    @property
    def device_class(self) -> str:
        """The normalised model name: the TPS key's ``deviceClass`` and a label value."""
        return device_class(self.vendor, self.name, self.mig_profile)

    @property
    def int4(self) -> bool:
        """Whether the backends' 4-bit weight kernels (AWQ/GPTQ/GGUF Q4) run on it."""
        return INT4_RULES[self.vendor](self.arch)


_TRADEMARKS = re.compile(r"\((r|tm|c)\)", re.IGNORECASE)
_BRACKETED = re.compile(r"\[(.+)\]")
_NOT_LABEL = re.compile(r"[^a-z0-9.]+")


def device_class(vendor: Vendor, name: str, mig_profile: str | None = None) -> str:
    """``vendor-model`` in lower case, ``-`` between words: a valid label value.

    ``NVIDIA GeForce RTX 4090`` → ``nvidia-geforce-rtx-4090``; ``Intel(R) Data Center GPU
    Max 1550`` → ``intel-data-center-gpu-max-1550``; a pci.ids name such as ``Navi 31
    [Radeon RX 7900 XT/7900 XTX]`` keeps its bracketed marketing part; a MIG instance
    appends ``mig-<profile>``, since its throughput is a fraction of the whole GPU's.
    """
    text = _TRADEMARKS.sub("", name)
    bracketed = _BRACKETED.search(text)
    if bracketed is not None:
        text = bracketed.group(1)
    slug = _NOT_LABEL.sub("-", text.lower()).strip("-.")
    prefix = vendor.value.lower()
    if not slug.startswith(prefix):
        slug = f"{prefix}-{slug}" if slug else prefix
    if mig_profile:
        slug = f"{slug}-mig-{_NOT_LABEL.sub('-', mig_profile.lower())}"
    return slug[:MAX_LABEL_VALUE].rstrip("-.")


def _nvidia_int4(arch: str | None) -> bool:
    # INT4 weight-only kernels (AWQ, GPTQ, Marlin) need Turing (sm_75) or newer.
    match = re.fullmatch(r"sm_(\d+)", arch or "")
    return match is not None and int(match.group(1)) >= 75


_AMD_INT4 = re.compile(r"gfx(90a|94\d|95\d|11\d\d|12\d\d)")
"""CDNA2/3/4 and RDNA3/4: the targets ROCm's AWQ/GPTQ kernels are built for."""


def _amd_int4(arch: str | None) -> bool:
    return arch is not None and _AMD_INT4.fullmatch(arch) is not None


def _intel_int4(arch: str | None) -> bool:
    # IPEX/oneDNN ship INT4 weight-only GEMMs for Xe-HPC (pvc), Arc/Flex (dg2), Battlemage.
    return arch in {"pvc", "dg2", "bmg"}


def _apple_int4(arch: str | None) -> bool:
    # MLX and llama.cpp's Metal kernels dequantise 4-bit weights on every Apple GPU.
    return True


INT4_RULES: dict[Vendor, Callable[[str | None], bool]] = {
    Vendor.NVIDIA: _nvidia_int4,
    Vendor.AMD: _amd_int4,
    Vendor.INTEL: _intel_int4,
    Vendor.APPLE: _apple_int4,
}
"""Per vendor: does the architecture run 4-bit weights (unknown architecture: no)."""


def nvidia_arch(compute_cap: str) -> str:
    """``8.9`` → ``sm_89`` (the compute capability, as CUDA's ``-arch`` names it)."""
    major, _, minor = compute_cap.strip().partition(".")
    if not (major.isdigit() and minor.isdigit()):
        raise ValueError(f"not a compute capability: {compute_cap!r}")
    return f"sm_{int(major)}{int(minor)}"


def mib(value_bytes: int) -> int:
    """Bytes in whole MiB (rounded down: never claim memory that is not there)."""
    return value_bytes // (1024 * 1024)
