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
    """Create the demo Model unless it exists, then print how to call it."""
    # Only created, never replaced: a restart must keep whatever the user changed in it.
    headers = {"Authorization": f"Bearer {admin_token.value}"} if admin_token else {}
    async with httpx.AsyncClient(
        base_url=urls["controller"], headers=headers, timeout=30
    ) as client:
        created = await _create_unless_present(client, demo_manifest(model_dir, idle_timeout))
    if not created:
        log.info(
            "kept the existing Model default/%s as it is (delete it and restart to get the "
            "demo's again)",
            DEMO_NAME,
        )
    print(banner(urls["proxy"], created) + admin_help(urls["controller"], admin_token), flush=True)


async def _create_unless_present(client: httpx.AsyncClient, manifest: dict[str, Any]) -> bool:
    """Create ``manifest``'s Model when there is none; False when one exists already."""
    item = f"/v1/admin/models/{DEMO_NAME}"
    found = await client.get(item)
    if found.status_code == 200:
        return False
    if found.status_code != 404:
        raise ConfigError(f"reading the demo model failed: {found.status_code} {found.text}")
    # POST creates only: a Model created between the GET and here is kept, not overwritten.
    response = await client.post("/v1/admin/models", json=manifest)
    if response.status_code == 409:
        return False
    if response.status_code >= 400:
        raise ConfigError(f"applying the demo model failed: {response.status_code} {response.text}")
    return True


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


def banner(proxy: str, created: bool = True) -> str:
    """How to call the demo model with curl and with the openai SDK."""
    state = (
        "is scaled to zero; the first request starts it"
        if created
        else "is kept as it was (its spec is yours to edit)"
    )
    return f"""
FlexInfer is up. The demo model '{DEMO_NAME}' {state}.

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
