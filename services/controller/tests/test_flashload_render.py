"""The Kubernetes side: the init container in a Pod and the cleanup Job, valid for 1.31."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from flexinfer_controller.flashload import FlashLoadSettings
from flexinfer_controller.flashload.__main__ import PROG, cleanup_parser, copy_parser
from flexinfer_controller.flashload.render import (
    MODULE,
    FlashPod,
    cleanup_job,
    engine_volume_mount,
    init_container,
    pod_volumes,
)

K8S = "1.31.0"
POD = FlashPod(key="default/llama", cache_claim="llama-cache", model_subpath="models/llama/")


def pod(settings: FlashLoadSettings) -> dict[str, Any]:
    engine = {
        "name": "engine",
        "image": "flexinfer/engine",
        "args": ["--model", POD.launch_path],
        "volumeMounts": [engine_volume_mount()],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "llama-0", "namespace": "default"},
        "spec": {
            "initContainers": [init_container(POD, settings)],
            "containers": [engine],
            "volumes": pod_volumes(POD),
        },
    }


@pytest.mark.parametrize(
    "settings",
    [FlashLoadSettings(), FlashLoadSettings(verify_integrity=True, exclude=["*.pth", "x y"])],
)
def test_the_init_container_is_a_valid_pod_part(settings: FlashLoadSettings) -> None:
    document = pod(settings)
    kubernetes_validate.validate(document, K8S, strict=True)
    container = document["spec"]["initContainers"][0]
    assert container["image"] == "flexinfer/controller"
    assert "limits" not in container["resources"]  # tmpfs pages count against the copier
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["model-cache"] == {
        "name": "model-cache",
        "mountPath": "/models",
        "readOnly": True,
    }
    assert mounts["flash-tmpfs"]["mountPath"] == "/dev/shm"
    volumes = {v["name"]: v for v in document["spec"]["volumes"]}
    assert volumes["flash-tmpfs"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    assert volumes["model-cache"]["persistentVolumeClaim"]["readOnly"] is True
    assert POD.launch_path == "/dev/shm/default_llama"


def test_the_init_command_is_what_the_flash_loader_parses() -> None:
    settings = FlashLoadSettings(concurrency=8, verify_integrity=True, exclude=["*.pth"])
    command = init_container(POD, settings)["command"]
    assert command[:3] == MODULE == PROG.split()
    args = copy_parser(PROG).parse_args(command[3:])
    assert (str(args.source), str(args.dest), args.name) == (
        "/models/models/llama",
        "/dev/shm",
        "default/llama",
    )
    assert (args.concurrency, args.verify_integrity, args.exclude) == (8, True, ["*.pth"])
    assert (args.chunk_size_mb, args.margin_mb, args.reuse_check) == (64, 256, "mtime")


def test_the_cleanup_job_is_valid_and_runs_cleanup() -> None:
    job = cleanup_job(
        "flash-cleanup-llama", "flexinfer", ["default/qwen", "team/phi"], node_name="gpu-1"
    )
    kubernetes_validate.validate(job, K8S, strict=True)
    spec = job["spec"]["template"]["spec"]
    assert spec["nodeName"] == "gpu-1"
    assert spec["volumes"][0]["hostPath"] == {"path": "/dev/shm", "type": "Directory"}
    command = spec["containers"][0]["command"]
    assert command[:4] == [*MODULE, "cleanup"]
    args = cleanup_parser(PROG).parse_args(command[4:])
    assert (str(args.dest), args.keep) == ("/dev/shm", ["default/qwen", "team/phi"])


def test_a_job_keeping_nothing_is_valid() -> None:
    job = cleanup_job("flash-cleanup", "flexinfer", [])
    kubernetes_validate.validate(job, K8S, strict=True)
    assert "nodeName" not in job["spec"]["template"]["spec"]
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert cleanup_parser(PROG).parse_args(command[4:]).keep == []


def test_validation_would_catch_a_mistake() -> None:
    document = pod(FlashLoadSettings())
    document["spec"]["initContainers"][0]["volumeMounts"][0]["readonly"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(document, K8S, strict=True)
