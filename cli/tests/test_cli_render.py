"""``flexinfer render``: every object of a Model as valid YAML, bad files in one line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from flexinfer_testing.repo import repo_root
from flexinfer_testing.stack import flexinfer_command

EXAMPLES = repo_root() / "k8s" / "examples"


def render(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        flexinfer_command("render", *args), input=stdin, capture_output=True, text=True, timeout=120
    )


def test_the_tiny_example_renders_valid_objects() -> None:
    done = render("-f", str(EXAMPLES / "model-tiny.yaml"), "--runtime", "kubernetes")
    assert done.returncode == 0, done.stderr
    objects = list(yaml.safe_load_all(done.stdout))
    assert [o["kind"] for o in objects] == ["Service", "Deployment"]
    for obj in objects:
        kubernetes_validate.validate(obj, "1.31.0", strict=True)
    deployment = objects[1]
    assert deployment["spec"]["replicas"] == 0  # minReplicas 0: scaled to zero until asked
    engine = deployment["spec"]["template"]["spec"]["containers"][0]
    assert engine["command"] == ["python", "-m", "flexinfer_engine", "serve"]


def test_a_registry_source_is_cache_gated_and_legacy_kinds_convert() -> None:
    done = render("-f", str(EXAMPLES / "model-llama-vllm.yaml"), "--replicas", "1")
    assert done.returncode == 0, done.stderr
    kinds = [o["kind"] for o in yaml.safe_load_all(done.stdout)]
    assert kinds == ["Service", "PersistentVolumeClaim", "Job", "Deployment"]
    gated = render("-f", str(EXAMPLES / "model-llama-vllm.yaml"))
    (deployment,) = [o for o in yaml.safe_load_all(gated.stdout) if o["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 0  # the prefetch has not filled the cache yet
    legacy = render("-f", str(EXAMPLES / "modeldeployment-qwen-vllm.yaml"))
    assert legacy.returncode == 0, legacy.stderr
    assert "Deployment" in [o["kind"] for o in yaml.safe_load_all(legacy.stdout)]


def test_cleanup_prints_the_flash_cleanup_job() -> None:
    done = render("-f", str(EXAMPLES / "model-llama-vllm.yaml"), "--cleanup")
    assert done.returncode == 0, done.stderr
    (job,) = yaml.safe_load_all(done.stdout)
    assert job["metadata"]["labels"]["flexinfer.ai/component"] == "flash-cleanup"
    assert job["spec"]["template"]["spec"]["nodeName"] == "NODE"  # a placeholder to replace
    nodes = ("--node", "gpu-1", "--node", "gpu-2")
    done = render("-f", str(EXAMPLES / "model-llama-vllm.yaml"), "--cleanup", *nodes)
    assert done.returncode == 0, done.stderr
    jobs = list(yaml.safe_load_all(done.stdout))
    assert sorted(j["spec"]["template"]["spec"]["nodeName"] for j in jobs) == ["gpu-1", "gpu-2"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("a: [", "is not YAML"),
        ("", "holds no documents"),
        ("kind: Pod\n", "is a 'Pod', not a Model"),
        ("kind: Model\napiVersion: ai.flexinfer/v1alpha2\nmetadata: {name: x}\nspec: {}\n",
         "document 1: spec.backend: Field required"),
        ("kind: Model\napiVersion: ai.flexinfer/v1alpha2\nmetadata: {name: x}\n"
         "spec: {backend: vllm, source: 'hf://a/b', gpu: {vendor: cpu}}\n",
         "Model default/x: backend 'vllm' does not support GPU vendor 'cpu'"),
    ],
)  # fmt: skip
def test_a_bad_file_exits_2_with_one_line(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "model.yaml"
    if content is not None:
        path.write_text(content)
    done = render("-f", str(path))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("flexinfer render: ")
    assert message in done.stderr


def test_stdin_is_read_with_a_dash() -> None:
    done = render("-f", "-", stdin=(EXAMPLES / "model-tiny.yaml").read_text())
    assert done.returncode == 0, done.stderr
    assert "kind: Deployment" in done.stdout
