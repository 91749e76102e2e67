"""NVML: preferred where ``nvidia-ml-py`` finds a driver; every way it cannot falls through.

``nvidia-ml-py`` is not installed here, so the first test exercises the real absence. The
others load a stand-in ``pynvml`` module from a directory on ``sys.path`` (named by the
``nvml_module`` setting), as a fake tool stands in for ``nvidia-smi``: one whose ``nvmlInit``
raises what the real package raises on a machine without a driver, one that answers.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from flexinfer_agent.core.commands import ToolFailedError, ToolMissingError
from flexinfer_agent.core.discovery import Discovery
from flexinfer_agent.core.sources.nvidia_smi import QUERY
from flexinfer_agent.core.sources.nvml import NvmlSource
from flexinfer_agent.settings import DiscoverySettings

FIXTURES = Path(__file__).parent / "fixtures"

NO_DRIVER = """
class NVMLError(Exception):
    pass
class NVMLError_LibraryNotFound(NVMLError):
    pass
def nvmlInit():
    raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")
"""

BROKEN = """
class NVMLError(Exception):
    pass
class NVMLError_Unknown(NVMLError):
    pass
def nvmlInit():
    pass
def nvmlShutdown():
    pass
def nvmlDeviceGetCount():
    raise NVMLError_Unknown("Unknown Error")
"""

# One H100 and one A100 in MIG mode with a 3g.40gb and a 4g.40gb instance.
ANSWERS = """
from types import SimpleNamespace as NS
class NVMLError(Exception):
    pass
NVML_DEVICE_MIG_ENABLE = 1
GPUS = [
    NS(name="NVIDIA H100 80GB HBM3", uuid="GPU-h", total=85520809984, free=84991410176,
       cc=(9, 0), mig=None),
    NS(name="NVIDIA A100-SXM4-80GB", uuid="GPU-a", total=85899345920, free=84987740160,
       cc=(8, 0), mig=[NS(name="NVIDIA A100-SXM4-80GB MIG 3g.40gb", uuid="MIG-1",
                          total=42144366592, free=41741713408), None,
                       NS(name="NVIDIA A100-SXM4-80GB MIG 4g.40gb", uuid="MIG-2",
                          total=42144366592, free=20000000000)]),
]
def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlDeviceGetCount(): return len(GPUS)
def nvmlDeviceGetHandleByIndex(i): return GPUS[i]
def nvmlDeviceGetName(h): return h.name
def nvmlDeviceGetUUID(h): return h.uuid
def nvmlDeviceGetMemoryInfo(h): return NS(total=h.total, free=h.free, used=h.total - h.free)
def nvmlDeviceGetCudaComputeCapability(h): return h.cc
def nvmlDeviceGetMigMode(h):
    if h.mig is None:
        raise NVMLError("Not Supported")
    return (1, 1)
def nvmlDeviceGetMaxMigDeviceCount(h): return len(h.mig)
def nvmlDeviceGetMigDeviceHandleByIndex(h, i):
    if h.mig[i] is None:
        raise NVMLError("Not Found")
    return h.mig[i]
"""


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> str:
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


async def test_without_the_package_nvml_is_missing() -> None:
    assert importlib.util.find_spec("pynvml") is None, "nvidia-ml-py is installed here"
    with pytest.raises(ToolMissingError, match="not installed"):
        await NvmlSource(DiscoverySettings()).discover()


async def test_without_a_driver_nvml_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _module(tmp_path, monkeypatch, "nvml_no_driver", NO_DRIVER)
    with pytest.raises(ToolMissingError, match="Not Found"):
        await NvmlSource(DiscoverySettings(nvml_module=module)).discover()


async def test_an_nvml_error_fails_the_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _module(tmp_path, monkeypatch, "nvml_broken", BROKEN)
    with pytest.raises(ToolFailedError, match="Unknown Error"):
        await NvmlSource(DiscoverySettings(nvml_module=module)).discover()


async def test_devices_and_mig_instances(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = _module(tmp_path, monkeypatch, "nvml_answers", ANSWERS)
    gpus = await NvmlSource(DiscoverySettings(nvml_module=module)).discover()
    assert [(g.name, g.arch, g.mig_profile, g.memory_total_mib) for g in gpus] == [
        ("NVIDIA H100 80GB HBM3", "sm_90", None, 81559),
        ("NVIDIA A100-SXM4-80GB", "sm_80", "3g.40gb", 40192),
        ("NVIDIA A100-SXM4-80GB", "sm_80", "4g.40gb", 40192),
    ]
    assert gpus[2].memory_free_mib == 19073
    assert gpus[2].index == 1


async def test_discovery_falls_through_nvml_to_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_tool: Callable[..., str]
) -> None:
    tool = fake_tool("nvidia-smi", {" ".join(QUERY): "nvidia-smi/l4.csv"})
    module = _module(tmp_path, monkeypatch, "nvml_no_driver2", NO_DRIVER)
    settings = DiscoverySettings(
        sources=["nvml", "nvidia-smi"], nvml_module=module, nvidia_smi=tool
    )
    inventory = await Discovery.from_settings(settings).run()
    assert inventory.source == "nvidia-smi"
    assert len(inventory.gpus) == 1
    assert [(e.source, e.reason) for e in inventory.errors] == [("nvml", "missing")]


async def test_with_the_real_package_and_no_driver_nvml_falls_through() -> None:
    pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed here")
    try:
        gpus = await NvmlSource(DiscoverySettings()).discover()
    except (ToolMissingError, ToolFailedError):
        return
    assert gpus  # a machine with a driver: NVML answered
