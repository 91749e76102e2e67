"""``flexinfer up --gpus`` / ``./dev up --gpus``: a declared GPU inventory (and the arbiter)
for the embedded stack's controller, as people write it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from flexinfer_cli.gpus import GpuSpecError, parse_gpus
from flexinfer_cli.stack import EmbeddedStack
from flexinfer_cli.up import parse_options
from flexinfer_controller.settings import ControllerSettings
from flexinfer_testing.repo import repo_root
from flexinfer_testing.stack import flexinfer_command

ROOT = repo_root()


@pytest.mark.parametrize(
    ("text", "declared"),
    [
        ("1x nvidia sm_90 24GiB", [{"count": 1, "vendor": "nvidia", "arch": "sm_90",
                                    "vram": "24Gi"}]),
        ("nvidia", [{"vendor": "nvidia"}]),
        ("24 GiB sm_89 NVIDIA 2 x", [{"vram": "24Gi", "arch": "sm_89", "vendor": "nvidia",
                                      "count": 2}]),
        ("2\u00d7 amd gfx1100 48GB node=box; intel 16Gi",
         [{"count": 2, "vendor": "amd", "arch": "gfx1100", "vram": "48G", "node": "box"},
          {"vendor": "intel", "vram": "16Gi"}]),
        ('[{"vendor": "nvidia", "vram": "80Gi"}]', [{"vendor": "nvidia", "vram": "80Gi"}]),
    ],
)  # fmt: skip
def test_declarations_read_as_the_controller_setting(
    text: str, declared: list[dict[str, Any]]
) -> None:
    assert parse_gpus(text) == declared
    assert ControllerSettings.model_validate({"gpus": declared}).gpus  # taken as they are


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty"),
        ("1x nvidia 24", "'24' is not a count"),
        ("sm_90 24GiB", "no vendor"),
        ("nvidia amd", "two values for the vendor"),
        ("[1]", "list of objects"),
        ("[nvidia", "not a JSON list"),
    ],
)
def test_a_bad_declaration_names_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(GpuSpecError, match=says):
        parse_gpus(text)


def test_the_flags_reach_the_embedded_controller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The flags win over the environment's inventory and mode.
    monkeypatch.setenv("FLEXINFER_CONTROLLER_GPUS", '[{"vendor": "amd"}]')
    monkeypatch.setenv("FLEXINFER_CONTROLLER_GPU_SHARING_DEMAND_WINDOW_S", "7")
    argv = ["--data-dir", str(tmp_path), "--port", "0"]
    options = parse_options([*argv, "--gpus", "1x nvidia sm_90 24GiB", "--gpu-sharing", "arbiter"])
    stack = EmbeddedStack(options.data_dir, options.host, options.ports, options.controller)
    controller = stack.configure().controller
    [gpu] = controller.gpus
    assert (gpu.vendor, gpu.count, gpu.arch, gpu.vram) == ("nvidia", 1, "sm_90", "24Gi")
    assert controller.gpu_sharing.mode == "arbiter"
    assert controller.gpu_sharing.demand_window_s == 7.0  # the rest still from the env

    # Without the flags, the environment's settings stand.
    plain = parse_options(argv)
    assert plain.controller == {}
    stack = EmbeddedStack(plain.data_dir, plain.host, plain.ports, plain.controller)
    controller = stack.configure().controller
    assert [g.vendor for g in controller.gpus] == ["amd"]
    assert controller.gpu_sharing.mode == "none"


def _run(command: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False
    )


def test_a_bad_gpus_flag_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    up = [*flexinfer_command(), "up", "--data-dir", str(tmp_path / "up"), "--port", "0"]
    done = _run([*up, "--gpus", "1x nvidia 24"], tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1].startswith("flexinfer up: error: --gpus: '24' is not")
    # What parses but the controller refuses (an architecture of 40 characters):
    done = _run([*up, "--gpus", f"nvidia sm_{'9' * 40}"], tmp_path)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("flexinfer up: invalid setting gpus.0.arch "), done.stderr
    assert "at most 32 characters" in done.stderr
    assert not (tmp_path / "up" / "models").exists()  # nothing was generated


def test_dev_up_passes_the_gpus_flag_on(tmp_path: Path) -> None:
    stamp = ROOT / ".venv" / ".setup-stamp"
    if not stamp.exists():
        pytest.skip("this checkout has no .venv: ./dev up would set it up first")
    done = _run([str(ROOT / "dev"), "up", "--port", "0", "--gpus", "1x nvidia 24"], tmp_path)
    if "is up to date" not in done.stderr:
        pytest.skip("this checkout's .venv is not at its current versions: ./dev would install")
    assert done.returncode == 2, done.stderr
    assert "flexinfer up: error: --gpus: '24' is not a count" in done.stderr
