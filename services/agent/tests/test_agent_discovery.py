"""Discovery: sources in order, the first with GPUs wins, failures recorded, never raised."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from flexinfer_agent.core.discovery import Discovery, SourceRegistry, builtin_sources
from flexinfer_agent.core.gpu import GPU, Vendor
from flexinfer_agent.core.sources.base import GPUSource
from flexinfer_agent.core.sources.nvidia_smi import QUERY
from flexinfer_agent.core.sources.rocm_smi import ARGS
from flexinfer_agent.settings import DEFAULT_SOURCES, DiscoverySettings
from flexinfer_common.errors import ConfigError

FIXTURES = Path(__file__).parent / "fixtures"


def test_the_builtin_sources_are_the_default_order() -> None:
    assert sorted(DEFAULT_SOURCES) == builtin_sources().names()
    assert DEFAULT_SOURCES[0] == "nvml"
    assert DEFAULT_SOURCES[-1] == "drm"


def test_an_unknown_source_is_a_settings_error() -> None:
    with pytest.raises(ConfigError, match="unknown source 'cuda'"):
        Discovery.from_settings(DiscoverySettings(sources=["nvidia-smi", "cuda"]))


async def test_failures_fall_through_to_the_first_source_with_gpus(
    tmp_path: Path, fake_tool: Callable[..., str]
) -> None:
    settings = DiscoverySettings(
        sources=["nvidia-smi", "xpu-smi", "rocm-smi", "drm"],
        nvidia_smi=fake_tool("nvidia-smi", {" ".join(QUERY): "rocm-smi/8x-mi300x.json"}),
        xpu_smi=str(tmp_path / "absent"),
        rocm_smi=fake_tool("rocm-smi", {" ".join(ARGS): "rocm-smi/rx-7900-xtx.json"}),
        drm_root=FIXTURES / "drm" / "mi300-box",
    )
    inventory = await Discovery.from_settings(settings).run()
    assert inventory.source == "rocm-smi"
    assert [g.name for g in inventory.gpus] == ["Navi 31 [Radeon RX 7900 XT/7900 XTX]"]
    assert [(e.source, e.reason) for e in inventory.errors] == [
        ("nvidia-smi", "bad-output"),
        ("xpu-smi", "missing"),
    ]


async def test_a_hung_tool_times_out_and_the_next_answers(fake_tool: Callable[..., str]) -> None:
    settings = DiscoverySettings(
        sources=["nvidia-smi", "drm"],
        nvidia_smi=fake_tool("nvidia-smi", {}, hang=True),
        drm_root=FIXTURES / "drm" / "l4-box",
        timeout_s=0.5,
    )
    inventory = await Discovery.from_settings(settings).run()
    assert inventory.source == "drm"
    assert [(e.source, e.reason) for e in inventory.errors] == [("nvidia-smi", "timeout")]


async def test_no_source_with_gpus_is_a_node_without_gpus(tmp_path: Path) -> None:
    settings = DiscoverySettings(sources=["drm"], drm_root=tmp_path)
    inventory = await Discovery.from_settings(settings).run()
    assert (inventory.gpus, inventory.source, inventory.errors) == ([], None, [])


class _Fixed:
    def __init__(self, gpus: list[GPU]) -> None:
        self._gpus = gpus

    async def discover(self) -> list[GPU]:
        return self._gpus


async def test_a_registered_source_joins_by_name() -> None:
    gpu = GPU(Vendor.NVIDIA, "NVIDIA L4", 0, "fixed")

    def factory(settings: DiscoverySettings) -> GPUSource:
        return _Fixed([gpu])

    registry = SourceRegistry({"empty": lambda s: _Fixed([])})
    registry.register("fixed", factory)
    discovery = Discovery.from_settings(DiscoverySettings(sources=["empty", "fixed"]), registry)
    assert (await discovery.run()).gpus == [gpu]


async def test_a_failure_is_logged_once_until_it_changes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    discovery = Discovery.from_settings(
        DiscoverySettings(sources=["rocm-smi"], rocm_smi=str(tmp_path / "rocm-smi"))
    )
    for _ in range(3):
        await discovery.run()
    assert sum("rocm-smi unavailable" in r.message for r in caplog.records) == 1
