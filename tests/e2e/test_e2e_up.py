"""``flexinfer up`` as a user runs it: the demo, endpoints.json, and a clean shutdown."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import openai
import psutil
import pytest

from flexinfer_testing.stack import flexinfer_command, stop_process, wait_for_file

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def engines_under(data_dir: Path) -> list[psutil.Process]:
    """Engine processes serving a model below ``data_dir``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmd = proc.info["cmdline"] or []
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if "flexinfer_engine" in cmd and any(str(data_dir) in part for part in cmd):
            found.append(proc)
    return found


def mx_download(server: str, name: str) -> subprocess.CompletedProcess[str]:
    """``flexinfer mx model download NAME`` against ``server``."""
    command = flexinfer_command("mx", "--server", server, "model", "download", name)
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_up_serves_the_demo_and_stops_cleanly(tmp_path: Path, stop_signal: int) -> None:
    data_dir = tmp_path / "state"
    log = (tmp_path / "up.log").open("wb")
    proc = subprocess.Popen(
        flexinfer_command("up", "--data-dir", str(data_dir), "--port", "0"),
        stdout=subprocess.PIPE,
        stderr=log,
        stdin=subprocess.DEVNULL,
    )
    log.close()
    try:
        urls = wait_for_file(data_dir / "endpoints.json", proc, timeout=90)
        assert set(urls) == {"proxy", "controller", "scheduler", "registry_http", "registry_grpc"}
        host, port = urls["registry_grpc"].rsplit(":", 1)
        socket.create_connection((host, int(port)), timeout=5).close()
        for name in ("controller", "scheduler", "registry_http"):
            assert httpx.get(f"{urls[name]}/healthz", timeout=10).status_code == 200

        with openai.OpenAI(base_url=f"{urls['proxy']}/v1", api_key="unused", timeout=90) as sdk:
            assert [m.id for m in sdk.models.list()] == ["tiny"]
            reply = sdk.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=8
            )
        assert reply.choices[0].message.content
        assert len(engines_under(data_dir)) == 1
        # The embedded registry reads file:// sources under the stack's models dir only.
        served = mx_download(urls["registry_grpc"], (data_dir / "models" / "tiny").as_uri())
        assert served.returncode == 0, served.stderr
        refused = mx_download(urls["registry_grpc"], tmp_path.as_uri())
        assert refused.returncode != 0
        assert "PERMISSION_DENIED" in refused.stderr or "not allowed" in refused.stderr
        assert (data_dir / "flexinfer.db").exists()
        assert (data_dir / "models" / "tiny" / "model.safetensors").exists()
    finally:
        code = stop_process(proc, stop_signal)
    banner = proc.stdout.read().decode() if proc.stdout else ""
    if proc.stdout:
        proc.stdout.close()
    assert code == 0
    assert "curl" in banner
    assert "from openai import OpenAI" in banner
    assert engines_under(data_dir) == [], "no orphan engine after shutdown"
    assert not (data_dir / "endpoints.json").exists()


def test_up_restart_reuses_the_generated_model(tmp_path: Path) -> None:
    data_dir = tmp_path / "state"
    for _ in range(2):
        proc = subprocess.Popen(
            flexinfer_command("up", "--data-dir", str(data_dir), "--port", "0"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        try:
            urls = wait_for_file(data_dir / "endpoints.json", proc, timeout=90)
            model = httpx.get(f"{urls['controller']}/v1/admin/models/tiny", timeout=10).json()
        finally:
            assert stop_process(proc) == 0
        stamp = (data_dir / "models" / "tiny" / "model.safetensors").stat().st_mtime_ns
        time.sleep(0.01)
    assert model["metadata"]["generation"] == 1, "re-applying the same demo is a no-op"
    assert (data_dir / "models" / "tiny" / "model.safetensors").stat().st_mtime_ns == stamp
    assert json.loads((data_dir / "models" / "tiny" / "config.json").read_text())
