"""The flexinfer command line: dispatch, errors and the developer subcommands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from flexinfer_cli.__main__ import main
from flexinfer_cli.up import parse_options
from flexinfer_testing.repo import repo_root

REPO = repo_root()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """``flexinfer ARGS`` as a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "flexinfer_cli", *args], capture_output=True, text=True, check=False
    )


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("up", "model generate", "crd generate", "proxy", "controller", "engine"):
        assert command in out


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2


def test_unknown_command_fails_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frobnicate"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "unknown command 'frobnicate'" in err


def test_committed_crds_are_current() -> None:
    result = run("crd", "generate", "--check", "--out", str(REPO / "k8s" / "crds"))
    assert result.returncode == 0, result.stderr


def test_crd_check_reports_drift(tmp_path: Path) -> None:
    result = run("crd", "generate", "--check", "--out", str(tmp_path))
    assert result.returncode == 1
    assert "out of date" in result.stderr
    assert list(tmp_path.iterdir()) == [], "--check writes nothing"


def test_model_generate_writes_a_hugging_face_layout(tmp_path: Path) -> None:
    out = tmp_path / "m"
    result = run("model", "generate", "tiny", "--out", str(out))
    assert result.returncode == 0, result.stderr
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "flexinfer-ref"
    assert (out / "model.safetensors").stat().st_size > 0


def test_model_generate_adapter_writes_a_peft_layout(tmp_path: Path) -> None:
    model, adapter = tmp_path / "m", tmp_path / "a"
    assert run("model", "generate", "tiny", "--out", str(model)).returncode == 0
    args = ("--model-dir", str(model), "--out", str(adapter), "--rank", "4", "--targets", "qkv")
    result = run("model", "generate-adapter", "sql", *args)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["targets"] == ["qkv"]
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert (config["peft_type"], config["r"], config["target_modules"]) == ("LORA", 4, ["qkv"])
    assert (adapter / "adapter_model.safetensors").stat().st_size > 0
    bad = run("model", "generate-adapter", "x", "--model-dir", str(model), "--out", str(adapter),
              "--targets", "c_attn")  # fmt: skip
    assert bad.returncode == 1
    assert bad.stderr.startswith("flexinfer model generate-adapter: error: Unknown target")
    assert bad.stderr.count("\n") == 1


def test_model_without_generate_is_a_usage_error() -> None:
    result = run("model", "frobnicate")
    assert result.returncode == 2


def test_service_subcommand_hands_off_to_the_service() -> None:
    result = run("proxy", "--help")
    assert result.returncode == 0
    assert "--port" in result.stdout


def test_up_defaults_match_the_readme(tmp_path: Path) -> None:
    options = parse_options(["--data-dir", str(tmp_path)])
    assert options.ports["proxy"] == 8080
    assert options.ports["registry_grpc"] == 8001
    assert options.data_dir == tmp_path.resolve()


def test_up_port_zero_frees_every_port(tmp_path: Path) -> None:
    options = parse_options(["--data-dir", str(tmp_path), "--port", "0"])
    assert set(options.ports.values()) == {0}


def test_up_rejects_an_invalid_port(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_options(["--data-dir", str(tmp_path), "--port", "70000"])
    assert exc.value.code == 2


def test_mx_hands_off_to_the_registry_client() -> None:
    result = run("mx", "--server", "127.0.0.1:1", "--timeout", "2", "ping")
    assert result.returncode == 3, "3 means the server is unreachable"
    assert result.stderr.strip()
