"""Running the quantizer: outputs appear whole or not at all, reruns are idempotent, the
command reads the Job's variables, and the formats it does not convert are refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flexinfer_controller.quantize import output
from flexinfer_controller.quantize.errors import QuantizeError, UnsupportedError
from flexinfer_controller.quantize.request import BUILT_IN, build_request, options_from_environ
from flexinfer_controller.quantize.run import CONVERTERS, run
from flexinfer_testing.quantize_models import llama_model, reference_model


def test_every_built_in_format_has_a_converter() -> None:
    assert sorted(CONVERTERS) == sorted(BUILT_IN)


def test_a_failure_midway_leaves_no_output(tmp_path: Path) -> None:
    source = llama_model(tmp_path / "llama", shards=2)
    # The second shard is cut short: the first is converted and written before it fails.
    second = sorted(source.glob("*.safetensors"))[1]
    second.write_bytes(second.read_bytes()[:-100])
    out = tmp_path / "llama-fp8"
    with pytest.raises(QuantizeError, match="past the end of the file"):
        run(build_request("FP8", str(source), str(out), {}))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["llama"]


def test_what_a_killed_run_left_is_removed_and_the_output_published(tmp_path: Path) -> None:
    source = reference_model(tmp_path / "ref")
    out = tmp_path / "ref-fp8"
    killed = tmp_path / ".ref-fp8.tmp-0badf00d"  # as a SIGKILLed run leaves it
    killed.mkdir()
    (killed / "model.safetensors").write_bytes(b"half")
    request = build_request("FP8", str(source), str(out), {})
    assert not output.is_complete(request)
    assert run(request)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ref", "ref-fp8"]
    marker = json.loads((out / output.MARKER).read_text())
    assert marker == {"format": "FP8", "input": str(source), "options": {},
                      "digest": request.digest()}  # fmt: skip


def test_a_rerun_reuses_the_output_and_other_options_replace_it(tmp_path: Path) -> None:
    source = reference_model(tmp_path / "ref")
    out = tmp_path / "ref-fp8"
    assert run(build_request("FP8", str(source), str(out), {}))
    weights = out / "model.safetensors"
    before = (weights.stat().st_ino, weights.stat().st_mtime_ns)
    assert not run(build_request("FP8", str(source), str(out), {}))
    assert (weights.stat().st_ino, weights.stat().st_mtime_ns) == before
    tensor = build_request("FP8", str(source), str(out), {"strategy": "tensor"})
    assert run(tensor)
    assert output.is_complete(tensor)
    config = json.loads((out / "config.json").read_text())
    assert config["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] == (
        "tensor"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ref", "ref-fp8"]


@pytest.mark.parametrize("fmt", ["AWQ", "GPTQ", "EXL2"])
def test_calibrated_formats_are_refused_naming_the_image_field(tmp_path: Path, fmt: str) -> None:
    source = reference_model(tmp_path / "ref")
    with pytest.raises(UnsupportedError, match=rf"{fmt} needs calibration.*spec\.quantize\.image"):
        run(build_request(fmt, str(source), str(tmp_path / "out"), {}))


@pytest.mark.parametrize(
    ("fmt", "source", "dest", "message"),
    [
        (None, "a", "b", "no format"),
        ("INT3", "a", "b", "not one of"),
        ("FP8", "", "b", "required"),
        ("FP8", "/m/a", "/m/a/q", "must not be the input"),
        ("FP8", "/m/a\n", "/m/b", "control characters"),
    ],
)
def test_bad_requests(fmt: str | None, source: str, dest: str, message: str) -> None:
    with pytest.raises(QuantizeError, match=message):
        build_request(fmt, source, dest, {})


def test_options_come_from_the_quantize_variables() -> None:
    environ = {"QUANTIZE_FORMAT": "GGUF", "QUANTIZE_INPUT": "/a", "QUANTIZE_OUTPUT": "/b",
               "QUANTIZE_TYPE": "F16", "QUANTIZE_WEIGHT_STRATEGY": "x", "HOME": "/"}  # fmt: skip
    assert options_from_environ(environ) == {"type": "F16", "weight_strategy": "x"}


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flexinfer_controller.quantize", *args],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_the_job_command(tmp_path: Path) -> None:
    source = llama_model(tmp_path / "llama")
    env = {"QUANTIZE_FORMAT": "GGUF", "QUANTIZE_INPUT": str(source),
           "QUANTIZE_OUTPUT": str(tmp_path / "out"), "QUANTIZE_TYPE": "F16"}  # fmt: skip
    done = _cli(env)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "model.gguf").is_file()
    flags = _cli({}, "--format", "fp8", "--input", str(source), "--output",
                 str(tmp_path / "fp8"), "--option", "strategy=tensor")  # fmt: skip
    assert flags.returncode == 0, flags.stderr
    refused = _cli({**env, "QUANTIZE_FORMAT": "AWQ"})
    assert refused.returncode == 2
    last = refused.stderr.strip().splitlines()[-1]
    assert "spec.quantize.image" in last
    broken = _cli({**env, "QUANTIZE_INPUT": str(tmp_path / "missing")})
    assert broken.returncode == 1
    assert "is not a directory" in broken.stderr
