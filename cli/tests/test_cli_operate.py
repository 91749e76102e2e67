"""``flexinfer get models`` shows residency and the GPU held; ``flexinfer pin|unpin|unload``
act on Models, against a real controller's admin API and against the fake apiserver."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flexinfer_common.api.operations import PINNED_ANNOTATION, UNLOADED_AT_ANNOTATION
from flexinfer_common.bus import topics
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_controller.testing import (
    Harness,
    demand,
    engine_pids,
    fake_model_dir,
    kill_engines,
    model_doc,
    run_controller,
)
from flexinfer_testing.cli import Ran, flexinfer, write_kubeconfig

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])
GPU = {"vendor": "nvidia", "count": 1, "arch": "sm_89", "vram": "24Gi", "node": "n1"}


@pytest.fixture(autouse=True)
def no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    assert kill_engines(tmp_path) == [], "a test left engines running"


def _doc(tmp_path: Path, name: str, **serverless: Any) -> dict[str, Any]:
    doc = model_doc(name, fake_model_dir(tmp_path / name).as_uri(), **serverless)
    doc["spec"]["gpu"] = {"vendor": "nvidia"}
    return doc


def _rows(ran: Ran) -> dict[str, dict[str, str]]:
    """A table's rows by NAME, each as {COLUMN: cell}."""
    assert ran.code == 0, ran.report()
    header, *rows = (line.split() for line in ran.out.splitlines())
    return {row[0]: dict(zip(header, row, strict=True)) for row in rows}


async def _resident(h: Harness, name: str) -> None:
    await h.publish(topics.DEMAND, demand(f"default/{name}"))
    await h.wait_phase(name, "Ready", timeout_s=20)


async def test_get_shows_residency_and_the_gpu_held(tmp_path: Path) -> None:
    async with run_controller(tmp_path, gpus=[GPU]) as h:
        s = ("--server", h.url)
        await h.put_model(_doc(tmp_path, "a"))
        await h.put_model(_doc(tmp_path, "b"))
        await _resident(h, "a")
        await h.wait_phase("b", "Idle")

        table = await flexinfer("get", "models", *s)
        assert table.out.splitlines()[0].split() == [
            "NAME", "BACKEND", "PHASE", "READY", "RESIDENCY", "GPU", "TPS", "AGE",
        ]  # fmt: skip
        rows = _rows(table)
        assert (rows["a"]["RESIDENCY"], rows["a"]["GPU"]) == ("Resident", "n1/0")
        # b would be placed on n1 too (status.gpu says so), but holds nothing.
        assert (rows["b"]["RESIDENCY"], rows["b"]["GPU"]) == ("Stopped", "<none>")

        pinned = await flexinfer("pin", "a", *s)
        assert (pinned.code, pinned.out) == (0, "model.ai.flexinfer/a pinned\n"), pinned.report()
        wide = _rows(await flexinfer("get", "models", "-o", "wide", *s))
        assert list(wide["a"]) == [
            "NAME", "BACKEND", "PHASE", "READY", "RESIDENCY", "GPU", "SHARED", "PRIORITY",
            "PINNED", "TPS", "AGE",
        ]  # fmt: skip
        assert (wide["a"]["PINNED"], wide["b"]["PINNED"]) == ("true", "<none>")
        as_json = json.loads((await flexinfer("get", "model", "a", "-o", "json", *s)).out)
        assert as_json["status"]["residency"] == "Resident"
        assert as_json["status"]["gpu"]["node"] == "n1"
        assert as_json["metadata"]["annotations"] == {PINNED_ANNOTATION: "true"}
        described = (await flexinfer("describe", "model", "a", *s)).out
        assert "Residency:    Resident on n1/0\n" in described
        assert "Pinned:       true\n" in described

        unpinned = await flexinfer("unpin", "a", *s)
        assert unpinned.out == "model.ai.flexinfer/a unpinned\n", unpinned.report()
        assert _rows(await flexinfer("get", "models", "-o", "wide", *s))["a"]["PINNED"] == "<none>"


async def test_unload_stops_the_engine_now(tmp_path: Path) -> None:
    async with run_controller(tmp_path, gpus=[GPU]) as h:
        s = ("--server", h.url)
        await h.put_model(_doc(tmp_path, "a"))
        await _resident(h, "a")
        assert len(engine_pids(tmp_path)) == 1

        unloaded = await flexinfer("unload", "a", *s)
        assert (unloaded.code, unloaded.out) == (0, "model.ai.flexinfer/a unloaded\n"), (
            unloaded.report()
        )
        assert engine_pids(tmp_path) == []  # answered once the engine exited
        row = _rows(await flexinfer("get", "models", *s))["a"]
        assert (row["PHASE"], row["RESIDENCY"], row["GPU"]) == ("Idle", "Stopped", "<none>")
        described = (await flexinfer("describe", "model", "a", *s)).out
        assert "Unloaded at:  20" in described

        await _resident(h, "a")  # the next request brings it back
        assert _rows(await flexinfer("get", "models", *s))["a"]["RESIDENCY"] == "Resident"


async def test_errors_are_one_line_and_non_zero(tmp_path: Path) -> None:
    async with run_controller(tmp_path) as h:
        s = ("--server", h.url)
        await h.put_model(model_doc("kept", fake_model_dir(tmp_path / "k").as_uri(), minReplicas=1))
        refused = await flexinfer("unload", "kept", *s)
        assert refused.code == 1, refused.report()
        assert refused.out == ""
        assert refused.err.startswith("flexinfer unload: 409 model default/kept cannot be "), (
            refused.err
        )
        assert "minReplicas is 1" in refused.err
        assert len(refused.err.splitlines()) == 1
        for verb in ("pin", "unpin", "unload"):
            missing = await flexinfer(verb, "ghost", *s)
            assert missing.code == 1, missing.report()
            assert missing.err.startswith(f"flexinfer {verb}: 404 "), missing.err
        # Several names: each failure is told, the others are done, and the exit says so.
        several = await flexinfer("pin", "ghost", "kept", *s)
        assert several.code == 1
        assert several.out == "model.ai.flexinfer/kept pinned\n"
        assert several.err.startswith("flexinfer pin: model.ai.flexinfer/ghost: 404 ")
        usage = await flexinfer("pin", *s)
        assert usage.code == 2
        other = await flexinfer("pin", "kept", "-n", "elsewhere", *s)
        assert other.code == 1
        assert "404" in other.err
        kube = await flexinfer("pin", "kept", "--kubeconfig", str(tmp_path / "absent"))
        assert kube.code == 2
        assert "no usable kubeconfig" in kube.err


async def test_pin_and_unload_through_the_apiserver(
    apiserver: KubeApiServer, tmp_path: Path
) -> None:
    kubeconfig = ("--kubeconfig", str(write_kubeconfig(tmp_path / "kubeconfig", apiserver.url)))
    for name, serverless in (("a", {}), ("kept", {"minReplicas": 1})):
        doc = {
            "apiVersion": "ai.flexinfer/v1alpha2",
            "kind": "Model",
            "metadata": {"name": name, "namespace": "ml", "annotations": {"team": "x"}},
            "spec": {"backend": "vllm", "source": f"hf://org/{name}", "serverless": serverless},
        }
        created = await flexinfer("apply", "-f", "-", *kubeconfig, stdin=json.dumps(doc))
        assert created.code == 0, created.report()

    pinned = await flexinfer("pin", "a", "-n", "ml", *kubeconfig)
    assert pinned.out == "model.ai.flexinfer/a pinned\n", pinned.report()
    stored = apiserver.get("models", "ml", "a")
    assert stored is not None
    assert stored["metadata"]["annotations"] == {"team": "x", PINNED_ANNOTATION: "true"}
    assert stored["metadata"]["generation"] == 1

    unloaded = await flexinfer("unload", "a", "-n", "ml", *kubeconfig)
    assert unloaded.out == "model.ai.flexinfer/a unloaded\n", unloaded.report()
    stored = apiserver.get("models", "ml", "a")
    assert stored is not None
    assert UNLOADED_AT_ANNOTATION in stored["metadata"]["annotations"]
    await flexinfer("unpin", "a", "-n", "ml", *kubeconfig)
    stored = apiserver.get("models", "ml", "a")
    assert stored is not None
    assert PINNED_ANNOTATION not in stored["metadata"]["annotations"]

    refused = await flexinfer("unload", "kept", "-n", "ml", *kubeconfig)
    assert refused.code == 1, refused.report()
    assert "minReplicas is 1" in refused.err
    assert len(refused.err.splitlines()) == 1
    kept = apiserver.get("models", "ml", "kept")
    assert kept is not None
    assert UNLOADED_AT_ANNOTATION not in kept["metadata"]["annotations"]
