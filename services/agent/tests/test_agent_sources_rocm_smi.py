"""rocm-smi: recorded JSON of an 8x MI300X box and an RX 7900 XTX (older key spelling)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from flexinfer_agent.core.commands import BadOutputError
from flexinfer_agent.core.gpu import Vendor
from flexinfer_agent.core.sources.rocm_smi import ARGS, RocmSmiSource, parse
from flexinfer_agent.settings import DiscoverySettings

FIXTURES = Path(__file__).parent / "fixtures" / "rocm-smi"


def test_mi300x_box() -> None:
    gpus = parse((FIXTURES / "8x-mi300x.json").read_text())
    assert len(gpus) == 8
    assert [g.index for g in gpus] == list(range(8))
    gpu = gpus[0]
    assert (gpu.vendor, gpu.name, gpu.arch) == (Vendor.AMD, "AMD Instinct MI300X", "gfx942")
    assert gpu.memory_total_mib == 196288  # 205822885888 B
    assert gpu.memory_free_mib == 196004
    assert gpus[2].memory_free_mib == 196288 - 102400
    assert gpu.device_class == "amd-instinct-mi300x"
    assert gpu.int4


def test_rx_7900_xtx_after_a_warning_line() -> None:
    [gpu] = parse((FIXTURES / "rx-7900-xtx.json").read_text())
    assert gpu.arch == "gfx1100"
    assert gpu.memory_total_mib == 24560
    assert gpu.device_class == "amd-radeon-rx-7900-xt-7900-xtx"
    assert gpu.int4


@pytest.mark.parametrize(
    "output", ["", "ERROR: No AMD GPUs specified", "{not json", '{"card0": "x"}', "[1]"]
)
def test_output_that_is_not_the_json_is_refused(output: str) -> None:
    with pytest.raises(BadOutputError):
        parse(output)


def test_non_card_entries_are_skipped() -> None:
    assert parse('{"system": {"Driver version": "6.7.0"}}') == []


async def test_the_tool_is_run_with_its_flags(fake_tool: Callable[..., str]) -> None:
    tool = fake_tool("rocm-smi", {" ".join(ARGS): "rocm-smi/8x-mi300x.json"})
    assert len(await RocmSmiSource(DiscoverySettings(rocm_smi=tool)).discover()) == 8
