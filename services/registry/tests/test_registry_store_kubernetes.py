"""The Kubernetes stores through the real ``kubernetes`` client against a small apiserver.

There is no kube-apiserver here, so the test starts ``FakeApiServer``: a real HTTP server
that speaks the Kubernetes REST protocol for namespaced custom resources, configured from
the CRDs committed in k8s/crds (plural, kind, status subresource, OpenAPI schema, the
``self == oldSelf`` immutability rules). It implements what the stores rely on: create
(409 AlreadyExists), get/list (labelSelector), PUT and JSON merge patch with
``metadata.resourceVersion`` preconditions (409 Conflict), the status subresource (status
ignored on create and on main-resource writes, everything but status ignored on /status),
schema validation (422), and delete with preconditions.
"""

from __future__ import annotations

import copy
import json
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonschema
import pytest
import yaml

from flexinfer_common.errors import ConfigError, InvalidSpecError, StoreError
from flexinfer_registry.adapters.kubernetes_api import KubeApi
from flexinfer_registry.adapters.stores import create_stores
from flexinfer_registry.adapters.stores.kubernetes import (
    MODEL_CACHE_ENTRY,
    MODEL_METADATA,
    KubernetesModelStore,
    KubernetesSourceStore,
)
from flexinfer_registry.adapters.stores.rfc3339 import format_ts
from flexinfer_registry.core.records import ModelStatus, Provider, SourceQuery, SourceStatus
from flexinfer_registry.core.store import ModelRegistryStore, SourceStore, Stores
from flexinfer_registry.settings import RegistrySettings
from flexinfer_registry.testing.replicas import check_exactly_once, check_whole_records
from flexinfer_registry.testing.store_contract import (
    MODEL_STORE_CHECKS,
    SOURCE_STORE_CHECKS,
    T0,
    ModelStoreCheck,
    SourceStoreCheck,
    source,
)

CRD_DIR = next(
    p / "k8s" / "crds" for p in Path(__file__).resolve().parents if (p / "k8s" / "crds").is_dir()
)


class ApiError(Exception):
    """An error answer: HTTP code, Status reason, message."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


class Crd:
    """What the fake needs from one CRD version."""

    def __init__(self, doc: dict[str, Any]) -> None:
        version = doc["spec"]["versions"][0]
        self.group, self.version = doc["spec"]["group"], version["name"]
        self.plural, self.kind = doc["spec"]["names"]["plural"], doc["spec"]["names"]["kind"]
        self.status_subresource = "status" in (version.get("subresources") or {})
        self.schema = version["schema"]["openAPIV3Schema"]
        spec_props = self.schema["properties"].get("spec", {}).get("properties", {})
        self.immutable = [
            name
            for name, prop in spec_props.items()
            if any(
                v.get("rule") == "self == oldSelf" for v in prop.get("x-kubernetes-validations", [])
            )
        ]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class FakeApiServer:
    """The objects, the resource-version counter, and the REST semantics."""

    def __init__(self) -> None:
        self.crds: dict[tuple[str, str, str], Crd] = {}
        for path in sorted(CRD_DIR.glob("*.yaml")):
            document = yaml.safe_load(path.read_text(encoding="utf-8"))
            # k8s/crds also holds the kustomization that lists these CRDs.
            if document.get("kind") != "CustomResourceDefinition":
                continue
            crd = Crd(document)
            self.crds[(crd.group, crd.version, crd.plural)] = crd
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.version = 0
        self.lock = threading.Lock()

    def handle(self, method: str, url: str, body: Any, content_type: str) -> tuple[int, Any]:
        """One request: the status code and the JSON answer."""
        parts = urlsplit(url)
        segs = parts.path.strip("/").split("/")
        if len(segs) < 6 or segs[0] != "apis" or segs[3] != "namespaces":
            raise ApiError(404, "NotFound", f"no route {parts.path}")
        crd = self.crds.get((segs[1], segs[2], segs[5]))
        if crd is None:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource {segs[5]}"
            )
        namespace, rest = segs[4], segs[6:]
        with self.lock:
            if not rest:
                if method == "GET":
                    selector = parse_qs(parts.query).get("labelSelector", [""])[0]
                    return 200, self._list(crd, namespace, selector)
                if method == "POST":
                    return 201, self._create(crd, namespace, body)
            elif len(rest) == 1 or (len(rest) == 2 and rest[1] == "status"):
                return self._item(crd, namespace, rest, method, body, content_type)
        raise ApiError(405, "MethodNotAllowed", f"{method} {parts.path}")

    def _item(
        self, crd: Crd, ns: str, rest: list[str], method: str, body: Any, content_type: str
    ) -> tuple[int, Any]:
        key = (crd.plural, ns, rest[0])
        current = self.objects.get(key)
        if current is None:
            raise ApiError(404, "NotFound", f'{crd.plural} "{rest[0]}" not found')
        status_only = len(rest) == 2
        if status_only and not crd.status_subresource:
            raise ApiError(404, "NotFound", f"{crd.plural} has no status subresource")
        if method == "GET" and not status_only:
            return 200, current
        if method == "DELETE" and not status_only:
            wanted = ((body or {}).get("preconditions") or {}).get("resourceVersion")
            self._precondition(current, wanted)
            del self.objects[key]
            return 200, current
        if method == "PATCH":
            if content_type != "application/merge-patch+json":
                raise ApiError(
                    415, "UnsupportedMediaType", f"unsupported patch type {content_type}"
                )
            self._precondition(current, ((body or {}).get("metadata") or {}).get("resourceVersion"))
            return 200, self._update(crd, key, current, merge_patch(current, body), status_only)
        if method == "PUT":
            self._precondition(current, (body.get("metadata") or {}).get("resourceVersion"))
            return 200, self._update(crd, key, current, body, status_only)
        raise ApiError(405, "MethodNotAllowed", method)

    @staticmethod
    def _precondition(current: dict[str, Any], wanted: str | None) -> None:
        if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                "the object has been modified; please apply your changes to the latest version",
            )

    def _next_version(self) -> str:
        self.version += 1
        return str(self.version)

    def _validate(self, crd: Crd, obj: dict[str, Any]) -> None:
        try:
            jsonschema.validate(obj, crd.schema)
        except jsonschema.ValidationError as exc:
            raise ApiError(422, "Invalid", f"{crd.kind} is invalid: {exc.message}") from exc

    def _create(self, crd: Crd, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        name = meta.get("name")
        if not name:
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        if (crd.plural, ns, name) in self.objects:
            raise ApiError(409, "AlreadyExists", f'{crd.plural} "{name}" already exists')
        if crd.status_subresource:
            obj.pop("status", None)
        self._validate(crd, obj)
        meta.update(
            namespace=ns,
            uid=str(uuid.uuid4()),
            resourceVersion=self._next_version(),
            generation=1,
            creationTimestamp=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        self.objects[(crd.plural, ns, name)] = obj
        return obj

    def _update(
        self,
        crd: Crd,
        key: tuple[str, str, str],
        current: dict[str, Any],
        wanted: dict[str, Any],
        status_only: bool,
    ) -> dict[str, Any]:
        new = copy.deepcopy(current)
        if status_only:
            new["status"] = copy.deepcopy(wanted.get("status"))
        else:
            new["spec"] = copy.deepcopy(wanted.get("spec"))
            for field in ("labels", "annotations"):
                new["metadata"][field] = copy.deepcopy((wanted.get("metadata") or {}).get(field))
            if not crd.status_subresource:
                new["status"] = copy.deepcopy(wanted.get("status"))
        new = {k: v for k, v in new.items() if v is not None}
        new["metadata"] = {k: v for k, v in new["metadata"].items() if v is not None}
        for field in crd.immutable:
            if (new.get("spec") or {}).get(field) != (current.get("spec") or {}).get(field):
                raise ApiError(422, "Invalid", f"spec.{field}: Invalid value: field is immutable")
        self._validate(crd, new)
        counted = ("spec",) if crd.status_subresource else ("spec", "status")
        if any(new.get(f) != current.get(f) for f in counted):
            new["metadata"]["generation"] = current["metadata"]["generation"] + 1
        if new != current:
            new["metadata"]["resourceVersion"] = self._next_version()
        self.objects[key] = new
        return new

    def _list(self, crd: Crd, ns: str, selector: str) -> dict[str, Any]:
        wanted = dict(term.replace("==", "=").split("=", 1) for term in selector.split(",") if term)
        items = [
            obj
            for (plural, namespace, _), obj in sorted(self.objects.items())
            if plural == crd.plural
            and namespace == ns
            and all((obj["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())
        ]
        return {
            "apiVersion": f"{crd.group}/{crd.version}",
            "kind": f"{crd.kind}List",
            "metadata": {"resourceVersion": str(self.version)},
            "items": items,
        }


def _handler(fake: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects
        wbufsize = 1 << 16  # headers and body leave in one segment (no Nagle/delayed-ACK stall)

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            try:
                body = json.loads(raw) if raw else None
                code, answer = fake.handle(self.command, self.path, body, content_type)
            except ApiError as exc:
                code, answer = (
                    exc.code,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Failure",
                        "message": exc.message,
                        "reason": exc.reason,
                        "code": exc.code,
                    },
                )
            data = json.dumps(answer).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def do_PUT(self) -> None:
            self._serve()

        def do_PATCH(self) -> None:
            self._serve()

        def do_DELETE(self) -> None:
            self._serve()

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the tests assert on behaviour, not on access logs."""

    return Handler


@pytest.fixture
def apiserver() -> Iterator[tuple[str, FakeApiServer]]:
    """A fake apiserver on a free loopback port: (URL, its state)."""
    fake = FakeApiServer()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.mark.parametrize("check", MODEL_STORE_CHECKS, ids=lambda c: c.__name__)
async def test_kubernetes_model_store_contract(
    check: ModelStoreCheck, apiserver: tuple[str, FakeApiServer]
) -> None:
    url, _ = apiserver

    async def open_store() -> ModelRegistryStore:
        return KubernetesModelStore(KubeApi(host=url), "registry")

    await check(open_store)


@pytest.mark.parametrize("check", SOURCE_STORE_CHECKS, ids=lambda c: c.__name__)
async def test_kubernetes_source_store_contract(
    check: SourceStoreCheck, apiserver: tuple[str, FakeApiServer]
) -> None:
    url, _ = apiserver

    async def open_store() -> SourceStore:
        return KubernetesSourceStore(KubeApi(host=url), "registry")

    await check(open_store)


async def test_cache_entry_is_a_custom_resource(apiserver: tuple[str, FakeApiServer]) -> None:
    url, fake = apiserver
    store = KubernetesModelStore(KubeApi(host=url), "registry")
    try:
        assert await store.try_claim("Meta/Llama-3:8B", Provider.HUGGING_FACE, now=T0)
        await store.set_status(
            "Meta/Llama-3:8B", Provider.NGC, ModelStatus.DOWNLOADED, None, now=T0 + 2
        )
        ((key, obj),) = fake.objects.items()
        assert key[:2] == (MODEL_CACHE_ENTRY.plural, "registry")
        assert obj["metadata"]["name"].startswith("mx-cache-meta-llama-3-8b-")
        assert obj["spec"] == {"modelName": "Meta/Llama-3:8B", "provider": "HUGGING_FACE"}
        assert obj["status"]["phase"] == "DOWNLOADED"
        assert obj["status"]["provider"] == "NGC"
        # Names that sanitise alike are still distinct entries.
        assert store.object_name("a/b") != store.object_name("a-b")
        assert len(store.object_name("x" * 500)) <= 63
    finally:
        await store.close()


async def test_fake_enforces_immutability_and_schema(apiserver: tuple[str, FakeApiServer]) -> None:
    """The fake can fail the store: immutable spec and enum violations are 422s."""
    url, _ = apiserver
    api = KubeApi(host=url)
    objects = api.objects(MODEL_CACHE_ENTRY, "registry")
    try:
        body = {"metadata": {"name": "x"}, "spec": {"modelName": "m", "provider": "S3"}}
        await objects.create(body)
        with pytest.raises(InvalidSpecError, match="immutable"):
            await objects.patch("x", {"spec": {"provider": "GCS"}})
        with pytest.raises(InvalidSpecError):
            await objects.patch_status("x", {"status": {"phase": "FINE"}})
        with pytest.raises(InvalidSpecError):
            await objects.create(
                {"metadata": {"name": "y"}, "spec": {"modelName": "m", "provider": "FTP"}}
            )
    finally:
        await api.close()


async def test_claim_survives_an_entry_without_status(apiserver: tuple[str, FakeApiServer]) -> None:
    """A claimer that died right after the create leaves an entry that reads DOWNLOADING."""
    url, fake = apiserver
    store = KubernetesModelStore(KubeApi(host=url), "registry")
    try:
        assert await store.try_claim("m", Provider.S3, now=T0)
        ((_key, obj),) = fake.objects.items()
        del obj["status"]  # as if the status patch never happened
        record = await store.get("m")
        assert record is not None
        assert record.status == ModelStatus.DOWNLOADING
        assert record.created_at == T0
        assert record.updated_at == T0
        assert ModelStatus.DOWNLOADED not in await store.status_counts()
        assert not await store.try_claim("m", Provider.S3, now=T0 + 10, stale_after=60)
        assert await store.try_claim("m", Provider.S3, now=T0 + 61, stale_after=60)
    finally:
        await store.close()


async def test_worker_is_a_custom_resource_with_ready_condition(
    apiserver: tuple[str, FakeApiServer],
) -> None:
    url, fake = apiserver
    store = KubernetesSourceStore(KubeApi(host=url), "registry")
    try:
        record = source("worker-0", status=SourceStatus.INITIALIZING)
        await store.publish(record)
        assert await store.update_status(
            record.mx_source_id, "worker-0", SourceStatus.READY, 0.5, now=T0 + 1
        )
        ((key, obj),) = fake.objects.items()
        assert key[0] == MODEL_METADATA.plural
        assert obj["metadata"]["labels"]["ai.flexinfer/mx-source-id"] == record.mx_source_id
        (ready,) = obj["status"]["conditions"]
        assert (ready["type"], ready["status"]) == ("Ready", "True")
        assert obj["status"]["sourceLoad"] == 0.5
    finally:
        await store.close()


async def test_reaper_loses_to_a_heartbeat(apiserver: tuple[str, FakeApiServer]) -> None:
    """mark_stale patches at the resourceVersion it judged: a heartbeat in between wins."""
    url, fake = apiserver
    store = KubernetesSourceStore(KubeApi(host=url), "registry")
    try:
        await store.publish(source("w", updated_at=T0))
        name = store.object_name(source("w").mx_source_id, "w")
        original_list = fake._list

        def list_then_heartbeat(crd: Crd, ns: str, selector: str) -> dict[str, Any]:
            listed = copy.deepcopy(original_list(crd, ns, selector))
            key = (MODEL_METADATA.plural, "registry", name)
            fake._update(
                crd,
                key,
                fake.objects[key],
                merge_patch(fake.objects[key], {"status": {"updatedAt": format_ts(T0 + 95)}}),
                False,
            )
            return listed

        fake._list = list_then_heartbeat  # type: ignore[method-assign]
        assert await store.mark_stale(90, now=T0 + 100) == 0
        fake._list = original_list  # type: ignore[method-assign]
        assert await store.mark_stale(90, now=T0 + 200) == 1
    finally:
        await store.close()


async def test_unreachable_apiserver_is_a_store_error() -> None:
    store = KubernetesModelStore(KubeApi(host="http://127.0.0.1:1"), "registry")
    try:
        with pytest.raises(StoreError, match="kubernetes"):
            await store.get("m")
    finally:
        await store.close()


async def test_list_by_source_and_rank_uses_labels(apiserver: tuple[str, FakeApiServer]) -> None:
    url, _ = apiserver
    store = KubernetesSourceStore(KubeApi(host=url), "registry")
    try:
        await store.publish(source("a", rank=0))
        await store.publish(source("b", rank=1))
        await store.publish(source("c", rank=1, mx_source_id="ffff000000000000"))
        ones = await store.list(SourceQuery(mx_source_id="0123456789abcdef", worker_rank=1))
        assert [r.worker_id for r in ones] == ["b"]
    finally:
        await store.close()


@pytest.mark.parametrize("missing_files", [False, True], ids=["fresh", "missing-files"])
async def test_kubernetes_exactly_once_across_two_replicas(
    apiserver: tuple[str, FakeApiServer], tmp_path: Path, missing_files: bool
) -> None:
    """100 EnsureModelDownloaded calls over two registry apps sharing one apiserver."""
    url, _ = apiserver
    stores = Stores(
        models=KubernetesModelStore(KubeApi(host=url), "registry"),
        sources=KubernetesSourceStore(KubeApi(host=url), "registry"),
    )
    try:
        await check_exactly_once(stores, tmp_path / "cache", missing_files=missing_files)
    finally:
        await stores.close()


async def test_kubernetes_set_status_never_leaves_a_partial_record(
    apiserver: tuple[str, FakeApiServer],
) -> None:
    url, _ = apiserver
    await check_whole_records(
        KubernetesModelStore(KubeApi(host=url), "registry"),
        KubernetesModelStore(KubeApi(host=url), "registry"),
        writes=40,
    )


async def test_create_stores_from_kubeconfig(
    apiserver: tuple[str, FakeApiServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """store=kubernetes outside a cluster follows $KUBECONFIG, in the configured namespace."""
    url, fake = apiserver
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "fake", "user": "u"}}],
        "current-context": "c",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig), encoding="utf-8")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(path))
    settings = RegistrySettings(store="kubernetes", kubernetes_namespace="mx")
    stores = await create_stores(settings)
    try:
        assert isinstance(stores.models, KubernetesModelStore)
        assert await stores.models.try_claim("m", Provider.GCS, now=T0)
        assert {key[1] for key in fake.objects} == {"mx"}
    finally:
        await stores.close()
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="no Kubernetes configuration"):
        await create_stores(settings)
