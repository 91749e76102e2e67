"""Restarting ``flexinfer up`` keeps the user's edits to the demo Model."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from flexinfer_cli.stack import ENDPOINTS_FILE
from flexinfer_testing.stack import START_TIMEOUT_S, flexinfer_command, stop_process, wait_for_file


@contextmanager
def _up(data_dir: Path, log: Path) -> Iterator[dict[str, str]]:
    """``flexinfer up --port 0`` until the block ends; yields its endpoints."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEXINFER_")}
    with log.open("ab") as out:
        proc = subprocess.Popen(
            flexinfer_command("up", "--data-dir", str(data_dir), "--port", "0"),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        yield wait_for_file(data_dir / ENDPOINTS_FILE, proc, START_TIMEOUT_S * 2)
    finally:
        assert stop_process(proc, signal.SIGINT) == 0, log.read_text()[-2000:]


def _headers(data_dir: Path) -> dict[str, str]:
    token = data_dir / "admin-token"
    return {"Authorization": f"Bearer {token.read_text().strip()}"} if token.exists() else {}


def _model(urls: dict[str, str], data_dir: Path) -> dict[str, Any]:
    response = httpx.get(
        f"{urls['controller']}/v1/admin/models/tiny", headers=_headers(data_dir), timeout=30
    )
    response.raise_for_status()
    model: dict[str, Any] = response.json()
    return model


def test_a_restart_keeps_the_edited_demo_model(tmp_path: Path) -> None:
    data_dir, log = tmp_path / "data", tmp_path / "up.log"
    with _up(data_dir, log) as urls:
        model = _model(urls, data_dir)
        assert model["spec"]["serverless"]["idleTimeout"] == "5m0s"
        model["spec"]["serverless"]["idleTimeout"] = "17m"
        model["metadata"]["labels"] = {"edited-by": "me"}
        response = httpx.put(
            f"{urls['controller']}/v1/admin/models/tiny",
            json=model,
            headers=_headers(data_dir),
            timeout=30,
        )
        assert response.status_code == 200, response.text
        edited = response.json()
    first_run = log.read_text()
    assert "is scaled to zero; the first request starts it" in first_run

    with _up(data_dir, log) as urls:
        kept = _model(urls, data_dir)
    assert kept["spec"]["serverless"]["idleTimeout"] == "17m0s"
    assert kept["metadata"]["labels"] == {"edited-by": "me"}
    assert kept["metadata"]["generation"] == edited["metadata"]["generation"]
    second_run = log.read_text()[len(first_run) :]
    assert "kept the existing Model default/tiny as it is" in second_run
    assert "is kept as it was" in second_run


def test_a_deleted_demo_model_comes_back_on_restart(tmp_path: Path) -> None:
    data_dir, log = tmp_path / "data", tmp_path / "up.log"
    with _up(data_dir, log) as urls:
        response = httpx.delete(
            f"{urls['controller']}/v1/admin/models/tiny", headers=_headers(data_dir), timeout=30
        )
        assert response.status_code in (200, 204), response.text
    with _up(data_dir, log) as urls:
        assert _model(urls, data_dir)["spec"]["serverless"]["idleTimeout"] == "5m0s"
