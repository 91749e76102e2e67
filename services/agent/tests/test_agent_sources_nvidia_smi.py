"""nvidia-smi: recorded CSV query outputs of real GPUs, MIG through ``-L``, bad output."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from flexinfer_agent.core.commands import BadOutputError, ToolFailedError
from flexinfer_agent.core.gpu import Vendor
from flexinfer_agent.core.sources.nvidia_smi import (
    LIST,
    QUERY,
    NvidiaSmiSource,
    expand_mig,
    parse_mig_list,
    parse_query,
)
from flexinfer_agent.settings import DiscoverySettings

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia-smi"
QUERY_ARGS = " ".join(QUERY)


def _read(name: str) -> str:
    return (FIXTURES / name).read_text()


@pytest.mark.parametrize(
    ("fixture", "name", "arch", "total", "free", "device_class"),
    [
        ("a100-80gb.csv", "NVIDIA A100-SXM4-80GB", "sm_80", 81920, 81050, "nvidia-a100-sxm4-80gb"),
        ("h100-80gb-hbm3.csv", "NVIDIA H100 80GB HBM3", "sm_90", 81559, 81004,
         "nvidia-h100-80gb-hbm3"),
        ("rtx-4090.csv", "NVIDIA GeForce RTX 4090", "sm_89", 24564, 23801,
         "nvidia-geforce-rtx-4090"),
        ("l4.csv", "NVIDIA L4", "sm_89", 23034, 22478, "nvidia-l4"),
    ],
)  # fmt: skip
def test_one_gpu_models(
    fixture: str, name: str, arch: str, total: int, free: int, device_class: str
) -> None:
    [(gpu, mig)] = parse_query(_read(fixture))
    assert (gpu.vendor, gpu.name, gpu.arch, gpu.index) == (Vendor.NVIDIA, name, arch, 0)
    assert (gpu.memory_total_mib, gpu.memory_free_mib) == (total, free)
    assert gpu.device_class == device_class
    assert gpu.uuid is not None
    assert gpu.uuid.startswith("GPU-")
    assert gpu.int4
    assert not mig


def test_an_eight_gpu_box() -> None:
    gpus = [gpu for gpu, _ in parse_query(_read("8x-h100.csv"))]
    assert [gpu.index for gpu in gpus] == list(range(8))
    assert len({gpu.uuid for gpu in gpus}) == 8
    assert [gpu.memory_free_mib for gpu in gpus][2:4] == [40268, 40268]


def test_mig_instances_replace_their_parent() -> None:
    parsed = parse_query(_read("a100-mig.csv"))
    assert [mig for _, mig in parsed] == [True, False]
    listing = parse_mig_list(_read("a100-mig-L.txt"))
    gpus = expand_mig(parsed, listing)
    assert [(g.mig_profile, g.memory_total_mib, g.index) for g in gpus] == [
        ("3g.40gb", 40960, 0),
        ("2g.20gb", 20480, 0),
        ("1g.10gb", 10240, 0),
        (None, 81920, 1),
    ]
    assert gpus[0].uuid == "MIG-0e2c3f4a-5b6c-5d7e-8f90-a1b2c3d4e5f0"
    assert gpus[0].memory_free_mib is None  # -L does not say
    assert gpus[0].device_class == "nvidia-a100-sxm4-80gb-mig-3g.40gb"
    assert gpus[0].arch == "sm_80"


@pytest.mark.parametrize(
    "output",
    ["garbage\n", "0, GPU-x, NVIDIA L4, 23034\n", "x, GPU-x, NVIDIA L4, 1, 1, 8.9, [N/A]\n"],
)
def test_output_that_is_not_the_query_is_refused(output: str) -> None:
    with pytest.raises(BadOutputError):
        parse_query(output)


def test_a_field_a_bad_gpu_cannot_read_is_unknown() -> None:
    [(gpu, _)] = parse_query("0, GPU-x, NVIDIA L4, 23034, [Unknown Error], 8.9, [N/A]\n")
    assert gpu.memory_free_mib is None
    assert gpu.memory_total_mib == 23034


async def test_the_tool_is_run_with_the_query(fake_tool: Callable[..., str]) -> None:
    tool = fake_tool("nvidia-smi", {QUERY_ARGS: "nvidia-smi/8x-h100.csv"})
    gpus = await NvidiaSmiSource(DiscoverySettings(nvidia_smi=tool)).discover()
    assert len(gpus) == 8


async def test_mig_is_listed_with_a_second_call(fake_tool: Callable[..., str]) -> None:
    tool = fake_tool(
        "nvidia-smi",
        {QUERY_ARGS: "nvidia-smi/a100-mig.csv", " ".join(LIST): "nvidia-smi/a100-mig-L.txt"},
    )
    gpus = await NvidiaSmiSource(DiscoverySettings(nvidia_smi=tool)).discover()
    assert [g.mig_profile for g in gpus] == ["3g.40gb", "2g.20gb", "1g.10gb", None]


async def test_a_tool_that_refuses_the_query_fails(fake_tool: Callable[..., str]) -> None:
    # An old driver refuses compute_cap: "unknown option" and exit 2, like the fake.
    tool = fake_tool("nvidia-smi", {"--query-gpu=name --format=csv": "nvidia-smi/l4.csv"})
    with pytest.raises(ToolFailedError, match="exited with 2"):
        await NvidiaSmiSource(DiscoverySettings(nvidia_smi=tool)).discover()
