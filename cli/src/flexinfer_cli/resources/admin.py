"""The ``local`` backend: the controller's admin REST API, over httpx.

The server is ``--server``, else ``$FLEXINFER_SERVER``, else the controller of the running
``flexinfer up`` whose data directory is ``--data-dir`` (``endpoints.json``). The token is
``--token``, else ``$FLEXINFER_ADMIN_TOKEN``, else that data directory's ``admin-token``,
which is sent only to the server found in the same directory.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from flexinfer_cli.resources.client import LogOptions, Obj, ResourceClient
from flexinfer_cli.resources.errors import CliError, api_error, usage_error
from flexinfer_cli.resources.kinds import Kind

SERVER_ENV = "FLEXINFER_SERVER"
TOKEN_ENV = "FLEXINFER_ADMIN_TOKEN"
ENDPOINTS_FILE = "endpoints.json"
TOKEN_FILE = "admin-token"
TIMEOUT = httpx.Timeout(60.0, connect=5.0)
"""A delete waits (server side) until the Model's engines are being stopped."""


def find_server(args: argparse.Namespace) -> tuple[str, str | None]:
    """(admin API URL, admin token) from the flags, the environment or the data dir."""
    token = args.token or os.environ.get(TOKEN_ENV) or None
    server = args.server or os.environ.get(SERVER_ENV) or None
    if server is not None:
        return server.rstrip("/"), token
    data_dir: Path = args.data_dir
    try:
        urls = json.loads((data_dir / ENDPOINTS_FILE).read_text())
        url = str(urls["controller"])
    except (OSError, ValueError, KeyError, TypeError):
        raise usage_error(
            f"no server: pass --server URL, set {SERVER_ENV}, or run 'flexinfer up' "
            f"(no running stack in {data_dir}: {data_dir / ENDPOINTS_FILE} is missing)"
        ) from None
    if token is None:
        try:
            token = (data_dir / TOKEN_FILE).read_text().split()[0]
        except (OSError, IndexError):
            token = None  # the stack's admin API is open
    return url.rstrip("/"), token


def _message(response: httpx.Response) -> str:
    try:
        body: Any = response.json()
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
    except ValueError:
        pass
    return response.reason_phrase or "error"


class AdminClient(ResourceClient):
    """Models and LoRAAdapters through /v1/admin."""

    def __init__(self, url: str, token: str | None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url
        # trust_env=False: no proxy settings between the CLI and its controller.
        self._http = httpx.Client(base_url=url, headers=headers, timeout=TIMEOUT, trust_env=False)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> AdminClient:
        """The client the connection flags select."""
        url, token = find_server(args)
        if not url.startswith(("http://", "https://")):
            raise usage_error(f"--server {url!r} is not an http:// or https:// URL")
        return cls(url, token)

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise usage_error(f"cannot reach the admin API at {self.url}: {exc}") from exc
        if response.status_code >= 400:
            raise api_error(response.status_code, _message(response))
        return response

    @staticmethod
    def _params(namespace: str | None) -> dict[str, str]:
        return {"namespace": namespace} if namespace else {}

    def get(self, kind: Kind, namespace: str | None, name: str) -> Obj:
        """GET /v1/admin/<plural>/<name>."""
        path = f"/v1/admin/{kind.plural}/{name}"
        found: Obj = self._send("GET", path, params=self._params(namespace)).json()
        return found

    def list(self, kind: Kind, namespace: str | None) -> list[Obj]:
        """GET /v1/admin/<plural>."""
        path = f"/v1/admin/{kind.plural}"
        items: list[Obj] = self._send("GET", path, params=self._params(namespace)).json()["items"]
        return items

    def create(self, kind: Kind, namespace: str | None, body: Obj) -> Obj:
        """POST /v1/admin/<plural>."""
        path = f"/v1/admin/{kind.plural}"
        created: Obj = self._send("POST", path, params=self._params(namespace), json=body).json()
        return created

    def replace(self, kind: Kind, namespace: str | None, body: Obj) -> Obj:
        """PUT /v1/admin/<plural>/<name> (conditional on metadata.resourceVersion)."""
        path = f"/v1/admin/{kind.plural}/{body['metadata']['name']}"
        stored: Obj = self._send("PUT", path, params=self._params(namespace), json=body).json()
        return stored

    def delete(self, kind: Kind, namespace: str | None, name: str) -> None:
        """DELETE /v1/admin/<plural>/<name>."""
        self._send("DELETE", f"/v1/admin/{kind.plural}/{name}", params=self._params(namespace))

    def pin(self, namespace: str | None, name: str, pinned: bool) -> Obj:
        """POST /v1/admin/models/<name>/pin (or /unpin)."""
        path = f"/v1/admin/models/{name}/{'pin' if pinned else 'unpin'}"
        stored: Obj = self._send("POST", path, params=self._params(namespace)).json()
        return stored

    def unload(self, namespace: str | None, name: str) -> Obj:
        """POST /v1/admin/models/<name>/unload: answers once the engines stopped."""
        path = f"/v1/admin/models/{name}/unload"
        stored: Obj = self._send("POST", path, params=self._params(namespace)).json()
        return stored

    def logs(self, namespace: str | None, model: str, options: LogOptions) -> Iterator[bytes]:
        """GET /v1/admin/models/<model>/logs, streamed."""
        params: dict[str, str] = self._params(namespace)
        if options.follow:
            params["follow"] = "true"
        if options.tail_lines is not None:
            params["tailLines"] = str(options.tail_lines)
        if options.replica:
            params["replica"] = options.replica
        request = self._http.build_request(
            "GET", f"/v1/admin/models/{model}/logs", params=params,
            timeout=httpx.Timeout(None, connect=5.0),  # a follow may be quiet for hours
        )  # fmt: skip
        try:
            response = self._http.send(request, stream=True)
        except httpx.TransportError as exc:
            raise usage_error(f"cannot reach the admin API at {self.url}: {exc}") from exc
        try:
            if response.status_code >= 400:
                response.read()
                raise api_error(response.status_code, _message(response))
            yield from response.iter_raw()
        except httpx.TransportError as exc:
            raise CliError(f"the log stream broke: {exc}", 1) from exc
        finally:
            response.close()

    def put_benchmark(self, namespace: str, record: Obj) -> str:
        """PUT /v1/admin/benchmarks: the controller's benchmark table."""
        params = self._params(namespace)
        stored = self._send("PUT", "/v1/admin/benchmarks", params=params, json=record).json()
        return f"the benchmark table of {self.url} (namespace {namespace}, key {stored['key']})"

    def node_device_class(self, namespace: str, model: Obj) -> str | None:
        """The device class ``GET /v1/admin/nodes`` gives the GPUs in status.gpu."""
        gpu = (model.get("status") or {}).get("gpu") or {}
        if not gpu.get("node"):
            return None
        nodes: list[Obj] = self._send("GET", "/v1/admin/nodes").json()["items"]
        device = str(gpu.get("device") or "").split(",")[0]
        for node in nodes:
            if (node["node"], node["vendor"]) != (gpu["node"], gpu.get("vendor")):
                continue
            if not device.isdigit() or int(device) in node["devices"]:
                return str(node["deviceClass"])
        return None

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()
