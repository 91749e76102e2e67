"""xpu-smi (Intel Max 1550), system_profiler (Apple M2 Max) and the sysfs fallback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from flexinfer_agent.core.commands import BadOutputError, ToolMissingError
from flexinfer_agent.core.gpu import Vendor
from flexinfer_agent.core.sources.drm import DrmSource, scan
from flexinfer_agent.core.sources.system_profiler import ARGS as SP_ARGS
from flexinfer_agent.core.sources.system_profiler import SystemProfilerSource, parse, size_mib
from flexinfer_agent.core.sources.xpu_smi import LIST, XpuSmiSource, intel_arch
from flexinfer_agent.settings import DiscoverySettings

FIXTURES = Path(__file__).parent / "fixtures"


async def test_intel_max_1550_pair(fake_tool: Callable[..., str]) -> None:
    tool = fake_tool(
        "xpu-smi",
        {
            " ".join(LIST): "xpu-smi/max-1550-discovery.json",
            "discovery -d 0 -j": "xpu-smi/max-1550-device0.json",
            "discovery -d 1 -j": "xpu-smi/max-1550-device1.json",
        },
    )
    gpus = await XpuSmiSource(DiscoverySettings(xpu_smi=tool)).discover()
    assert [(g.vendor, g.arch, g.index) for g in gpus] == [
        (Vendor.INTEL, "pvc", 0),
        (Vendor.INTEL, "pvc", 1),
    ]
    assert gpus[0].memory_total_mib == 131072
    assert gpus[1].memory_free_mib == 67584
    assert gpus[0].device_class == "intel-data-center-gpu-max-1550"
    assert gpus[0].int4


@pytest.mark.parametrize(
    ("device_id", "arch"), [("0xbd5", "pvc"), ("0x56c0", "dg2"), ("0x56a0", "dg2"),
                            ("0xe20b", "bmg"), ("0x9a49", None)],
)  # fmt: skip
def test_intel_arch_from_the_pci_id(device_id: str, arch: str | None) -> None:
    assert intel_arch(device_id) == arch


async def test_apple_m2_max(fake_tool: Callable[..., str]) -> None:
    tool = fake_tool("system_profiler", {" ".join(SP_ARGS): "system-profiler/m2-max.json"})
    [gpu] = await SystemProfilerSource(DiscoverySettings(system_profiler=tool)).discover()
    assert (gpu.vendor, gpu.name, gpu.arch) == (Vendor.APPLE, "Apple M2 Max", "metal3")
    assert gpu.memory_total_mib == 65536  # unified memory
    assert gpu.device_class == "apple-m2-max"


def test_system_profiler_sizes_and_bad_output() -> None:
    assert (size_mib("64 GB"), size_mib("1536 MB"), size_mib("lots")) == (65536, 1536, None)
    with pytest.raises(BadOutputError):
        parse('{"SPDisplaysDataType": "none"}')
    assert parse('{"SPDisplaysDataType": []}') == []


def test_drm_lists_gpus_not_connectors_render_nodes_or_the_bmc() -> None:
    [gpu] = scan(FIXTURES / "drm" / "mi300-box")
    assert (gpu.vendor, gpu.index, gpu.arch) == (Vendor.AMD, 1, None)
    assert gpu.memory_total_mib == 196288
    assert gpu.memory_free_mib == 196004
    assert gpu.device_class == "amd-pci-74a1"
    assert not gpu.int4


async def test_drm_without_vram_files() -> None:
    settings = DiscoverySettings(drm_root=FIXTURES / "drm" / "l4-box")
    [gpu] = await DrmSource(settings).discover()
    assert (gpu.vendor, gpu.memory_total_mib, gpu.device_class) == (
        Vendor.NVIDIA,
        None,
        "nvidia-pci-27b8",
    )


def test_drm_on_a_machine_without_it(tmp_path: Path) -> None:
    with pytest.raises(ToolMissingError):
        scan(tmp_path / "absent")
