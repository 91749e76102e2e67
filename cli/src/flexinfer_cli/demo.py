"""The demo of ``flexinfer up``: a tiny generated model, applied with scale-to-zero."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx

from flexinfer_cli.admin_token import AdminToken
from flexinfer_common.errors import ConfigError

log = logging.getLogger("flexinfer.up")

DEMO_NAME = "tiny"


def ensure_demo_model(data_dir: Path) -> Path:
    """Generate the tiny reference model under DATA_DIR/models once; return its directory."""
    model_dir = data_dir / "models" / DEMO_NAME
    if (model_dir / "config.json").exists() and (model_dir / "model.safetensors").exists():
        return model_dir
    from flexinfer_engine.core.weights import generate_model

    log.info("generating the demo model in %s", model_dir)
    generate_model(model_dir, name=DEMO_NAME, preset="tiny", seed=0)
    return model_dir


def demo_manifest(model_dir: Path, idle_timeout: str) -> dict[str, Any]:
    """The demo Model document: the reference backend, scale to zero when idle."""
    return {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "Model",
        "metadata": {"name": DEMO_NAME, "namespace": "default"},
        "spec": {
            "backend": "reference",
            "source": model_dir.resolve().as_uri(),
            "gpu": {"vendor": "cpu"},
            "serverless": {
                "minReplicas": 0,
                "idleTimeout": idle_timeout,
                "coldStartTimeout": "60s",
            },
        },
    }


async def apply_demo(
    urls: dict[str, str], model_dir: Path, idle_timeout: str, admin_token: AdminToken | None
) -> None:
    """Apply the demo Model through the controller's admin API and print how to call it."""
    manifest = demo_manifest(model_dir, idle_timeout)
    headers = {"Authorization": f"Bearer {admin_token.value}"} if admin_token else {}
    async with httpx.AsyncClient(base_url=urls["controller"], timeout=30) as client:
        response = await client.put(f"/v1/admin/models/{DEMO_NAME}", json=manifest, headers=headers)
    if response.status_code >= 400:
        raise ConfigError(f"applying the demo model failed: {response.status_code} {response.text}")
    print(banner(urls["proxy"]) + admin_help(urls["controller"], admin_token), flush=True)


def admin_help(controller: str, admin_token: AdminToken | None) -> str:
    """How to call the admin API: with the token's file when it is guarded."""
    if admin_token is None:
        auth = ""
    elif admin_token.file is None:
        auth = ' -H "Authorization: Bearer $FLEXINFER_CONTROLLER_AUTH_TOKEN"'
    else:
        auth = f' -H "Authorization: Bearer $(cat {admin_token.file})"'
    return f"""Admin API (models, adapters, endpoints):

  curl{auth} {controller}/v1/admin/models
"""


def banner(proxy: str) -> str:
    """How to call the demo model with curl and with the openai SDK."""
    return f"""
FlexInfer is up. The demo model '{DEMO_NAME}' is scaled to zero; the first request starts it.

  curl {proxy}/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{{"model": "{DEMO_NAME}", "messages": [{{"role": "user", "content": "Hello"}}]}}'

  python - <<'PY'
  from openai import OpenAI
  client = OpenAI(base_url="{proxy}/v1", api_key="unused")
  reply = client.chat.completions.create(
      model="{DEMO_NAME}", messages=[{{"role": "user", "content": "Hello"}}], max_tokens=32)
  print(reply.choices[0].message.content)
  PY

Press Ctrl-C to stop (engines stop too).

"""
