"""The resource commands' kubernetes backend: a kubeconfig pointing at the shared fake apiserver."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_testing.cli import expect_error, flexinfer, write_kubeconfig

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])


@pytest.fixture
def kubeconfig(apiserver: KubeApiServer, tmp_path: Path) -> tuple[str, str]:
    """``--kubeconfig PATH`` of the fake apiserver."""
    return ("--kubeconfig", str(write_kubeconfig(tmp_path / "kubeconfig", apiserver.url)))


def _model(name: str, **serverless: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "Model",
        "metadata": {"name": name},
        "spec": {"backend": "vllm", "source": f"hf://org/{name}", "serverless": serverless},
    }


def _write(path: Path, *docs: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


async def test_apply_get_reapply_delete(
    apiserver: KubeApiServer, kubeconfig: tuple[str, str], tmp_path: Path
) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    _write(manifests / "10-a.yaml", _model("a"))
    _write(manifests / "20-b.yml", _model("b", minReplicas=1))
    (manifests / "notes.txt").write_text("not a manifest")
    applied = await flexinfer("apply", "-f", str(manifests), *kubeconfig)
    assert applied.out.splitlines() == [
        "model.ai.flexinfer/a created",
        "model.ai.flexinfer/b created",
    ], applied.report()
    stored = apiserver.get("models", "default", "a")
    assert stored is not None
    assert stored["spec"]["serverless"]["maxReplicas"] == 1
    apiserver.patch(
        "models",
        "default",
        "a",
        {"status": {"phase": "Ready", "readyReplicas": 1, "desiredReplicas": 1}},
        subresource="status",
    )

    table = await flexinfer("get", "models", *kubeconfig)
    assert table.code == 0, table.report()
    assert table.out.splitlines()[1].split()[:4] == ["a", "vllm", "Ready", "1/1"]
    listing = await flexinfer("get", "models", "-o", "yaml", *kubeconfig)
    reapplied = await flexinfer("apply", "-f", "-", *kubeconfig, stdin=listing.out)
    assert reapplied.out.split().count("unchanged") == 2, reapplied.report()
    changed = await flexinfer(
        "apply", "-f", "-", *kubeconfig, stdin=yaml.safe_dump(_model("a", maxReplicas=3))
    )
    assert changed.out == "model.ai.flexinfer/a configured\n", changed.report()
    assert apiserver.get("models", "default", "a")["metadata"]["generation"] == 2  # type: ignore[index]

    elsewhere = await flexinfer("get", "models", *kubeconfig, "--context", "elsewhere")
    assert (elsewhere.code, elsewhere.out) == (0, ""), elsewhere.report()
    described = await flexinfer("describe", "model", "a", *kubeconfig)
    assert "Replicas:     1 ready / 1 desired" in described.out

    deleted = await flexinfer("delete", "-f", str(manifests), *kubeconfig)
    assert deleted.code == 0, deleted.report()
    assert apiserver.objects("models") == []
    missing = await flexinfer("get", "model", "a", *kubeconfig)
    assert missing.code == 1
    assert "404" in missing.err
    assert missing.err.count("\n") == 1


async def test_scale_is_conditional_on_what_it_read(
    apiserver: KubeApiServer, kubeconfig: tuple[str, str]
) -> None:
    apiserver.create(
        "models", {**_model("a", idleTimeout="9m"), "metadata": {"name": "a", "labels": {"x": "y"}}}
    )
    scaled = await flexinfer("scale", "model", "a", "--replicas", "3", *kubeconfig)
    assert scaled.code == 0, scaled.report()
    model = apiserver.get("models", "default", "a")
    assert model is not None
    assert (
        model["spec"]["serverless"]["minReplicas"]
        == model["spec"]["serverless"]["maxReplicas"]
        == 3
    )
    assert model["spec"]["serverless"]["idleTimeout"] == "9m"
    assert model["metadata"]["labels"] == {"x": "y"}

    def concurrent_change() -> None:
        apiserver.edit("models", "default", "a", lambda m: m["metadata"]["labels"].update(z="w"))

    # Someone changes the Model between the CLI's read and its write: a 409, not a lost update.
    apiserver.after(concurrent_change, verb="get", resource="models", name="a")
    raced = await flexinfer("scale", "model", "a", "--replicas", "0", *kubeconfig)
    expect_error(raced, 1, "409", "run the command again")
    assert apiserver.get("models", "default", "a")["spec"]["serverless"]["minReplicas"] == 3  # type: ignore[index]


async def test_logs_read_the_model_pods(
    apiserver: KubeApiServer, kubeconfig: tuple[str, str]
) -> None:
    apiserver.create("models", _model("a"))
    none = await flexinfer("logs", "model", "a", *kubeconfig)
    expect_error(none, 1, "no pods")
    for pod, text in (("a-old", "old\n"), ("a-new", "one\ntwo\nthree\n")):
        apiserver.create("pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "labels": {"flexinfer.ai/model": "a"}},
            "spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai"}]},
        })  # fmt: skip
        apiserver.set_pod_log("default", pod, text)
    apiserver.create("pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "other", "labels": {"flexinfer.ai/model": "b"}},
        "spec": {"containers": [{"name": "engine", "image": "x"}]},
    })  # fmt: skip
    named = await flexinfer("logs", "model", "a", "--replica", "a-new", "--tail", "2", *kubeconfig)
    assert named.out == "two\nthree\n", named.report()
    assert (await flexinfer("logs", "model", "a", "--replica", "a-old", *kubeconfig)).out == "old\n"
    wrong = await flexinfer("logs", "model", "a", "--replica", "other", *kubeconfig)
    assert wrong.code == 1
    assert (await flexinfer("logs", "model", "nope", *kubeconfig)).code == 1


async def test_connection_errors(tmp_path: Path) -> None:
    dead = write_kubeconfig(tmp_path / "dead", "http://127.0.0.1:9")
    unreachable = await flexinfer("get", "models", "--kubeconfig", str(dead))
    expect_error(unreachable, 2, "cannot reach the apiserver")
    assert unreachable.err.count("\n") == 1
    (tmp_path / "garbage").write_text("clusters: [\n")
    bad = await flexinfer("get", "models", "--kubeconfig", str(tmp_path / "garbage"))
    expect_error(bad, 2)
    absent = await flexinfer("get", "models", "--kubeconfig", str(tmp_path / "absent"))
    expect_error(absent, 2, "kubeconfig")
    context = await flexinfer("get", "models", "--kubeconfig", str(dead), "--context", "nope")
    expect_error(context, 2, "'nope'")
