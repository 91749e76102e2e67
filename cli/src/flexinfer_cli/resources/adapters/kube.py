"""The ``kubernetes`` backend: the custom resources and pod logs through the apiserver.

The kubeconfig is ``--kubeconfig``, else ``$KUBECONFIG``, else ``~/.kube/config``, with
``--context`` or its current context (whose namespace is the default). Pod logs are those
of the Model's pods, found by the ``flexinfer.ai/model`` label the controller sets.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import urllib3.exceptions
import yaml
from kubernetes import client as kube_client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from pydantic import ValidationError

from flexinfer_cli.resources.client import LogOptions, Obj, ResourceClient
from flexinfer_cli.resources.errors import CliError, api_error, is_conflict, usage_error
from flexinfer_cli.resources.kinds import MODEL, Kind
from flexinfer_common.api.model import ModelSpec
from flexinfer_common.api.operations import (
    PINNED_ANNOTATION,
    UNLOADED_AT_ANNOTATION,
    unload_refusal,
    unload_stamp,
)
from flexinfer_common.placement import benchmark_key, device_class
from flexinfer_common.placement.tps import GLOBAL_RESULTS_CONFIGMAP

MODEL_LABEL = "flexinfer.ai/model"
TIMEOUT = (5.0, 60.0)
ANNOTATE_ATTEMPTS = 3
"""Reads and conditional writes of an annotation before a 409 is the user's to retry."""


def _reason(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason)


@contextlib.contextmanager
def _errors(where: str) -> Iterator[None]:
    """ApiException -> exit 1 with its status; an unreachable apiserver -> exit 2."""
    try:
        yield
    except ApiException as exc:
        if exc.status == 0 or exc.status is None:
            raise usage_error(f"cannot reach the apiserver at {where}: {exc.reason}") from exc
        raise api_error(exc.status, _reason(exc)) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise usage_error(f"cannot reach the apiserver at {where}: {exc}") from exc


class KubeResourceClient(ResourceClient):
    """The ai.flexinfer custom resources, and pods/log, through the official client."""

    def __init__(self, api_client: Any, namespace: str) -> None:
        self._api = api_client
        self._custom = kube_client.CustomObjectsApi(api_client)
        self._core = kube_client.CoreV1Api(api_client)
        self.default_namespace = namespace
        self.host = str(api_client.configuration.host)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> KubeResourceClient:
        """The client of the kubeconfig (and context) the flags select."""
        try:
            _, active = kube_config.list_kube_config_contexts(config_file=args.kubeconfig)
            if args.context:
                contexts, _ = kube_config.list_kube_config_contexts(config_file=args.kubeconfig)
                active = next((c for c in contexts if c["name"] == args.context), None)
                if active is None:
                    raise usage_error(f"kubeconfig has no context {args.context!r}")
            api = kube_config.new_client_from_config(
                config_file=args.kubeconfig, context=args.context
            )
        except (ConfigException, OSError, ValueError, TypeError, yaml.YAMLError) as exc:
            raise usage_error(f"no usable kubeconfig: {' '.join(str(exc).split())}") from exc
        api.configuration.retries = 0
        namespace = (active or {}).get("context", {}).get("namespace") or "default"
        return cls(api, namespace)

    def _ns(self, namespace: str | None) -> str:
        return namespace or self.default_namespace

    def get(self, kind: Kind, namespace: str | None, name: str) -> Obj:
        """GET the custom object."""
        with _errors(self.host):
            found: Obj = self._custom.get_namespaced_custom_object(
                kind.group, kind.version, self._ns(namespace), kind.plural, name,
                _request_timeout=TIMEOUT,
            )  # fmt: skip
        return found

    def list(self, kind: Kind, namespace: str | None) -> list[Obj]:
        """LIST the custom objects of one namespace."""
        with _errors(self.host):
            listing = self._custom.list_namespaced_custom_object(
                kind.group, kind.version, self._ns(namespace), kind.plural,
                _request_timeout=TIMEOUT,
            )  # fmt: skip
        items: list[Obj] = listing.get("items", [])
        for item in items:  # a list's items carry no apiVersion and kind on some servers
            item.setdefault("apiVersion", f"{kind.group}/{kind.version}")
            item.setdefault("kind", kind.name)
        return items

    def create(self, kind: Kind, namespace: str | None, body: Obj) -> Obj:
        """POST the custom object."""
        with _errors(self.host):
            created: Obj = self._custom.create_namespaced_custom_object(
                kind.group, kind.version, self._ns(namespace), kind.plural, body,
                _request_timeout=TIMEOUT,
            )  # fmt: skip
        return created

    def replace(self, kind: Kind, namespace: str | None, body: Obj) -> Obj:
        """PUT the custom object (the apiserver checks metadata.resourceVersion)."""
        with _errors(self.host):
            stored: Obj = self._custom.replace_namespaced_custom_object(
                kind.group, kind.version, self._ns(namespace), kind.plural,
                body["metadata"]["name"], body, _request_timeout=TIMEOUT,
            )  # fmt: skip
        return stored

    def delete(self, kind: Kind, namespace: str | None, name: str) -> None:
        """DELETE the custom object (the controller's finalizer may hold it a while)."""
        with _errors(self.host):
            self._custom.delete_namespaced_custom_object(
                kind.group, kind.version, self._ns(namespace), kind.plural, name,
                _request_timeout=TIMEOUT,
            )  # fmt: skip

    def pin(self, namespace: str | None, name: str, pinned: bool) -> Obj:
        """Set or remove the ``flexinfer.ai/pinned`` annotation (what the controller's
        admin API does, here through the apiserver)."""

        def change(model: Obj) -> dict[str, str]:
            annotations = dict((model.get("metadata") or {}).get("annotations") or {})
            if pinned:
                annotations[PINNED_ANNOTATION] = "true"
            else:
                annotations.pop(PINNED_ANNOTATION, None)
            return annotations

        return self._annotate(namespace, name, change)

    def unload(self, namespace: str | None, name: str) -> Obj:
        """Stamp ``flexinfer.ai/unloaded-at`` with this machine's clock (the controller
        compares it with the proxies' activity: keep the clocks in sync, as Kubernetes
        does anyway); refused when the Model's spec keeps replicas up."""
        stamp = unload_stamp()

        def change(model: Obj) -> dict[str, str]:
            try:
                spec = ModelSpec.model_validate(model.get("spec") or {})
            except ValidationError as exc:
                raise CliError(f"model {name}: its spec does not validate: {exc}", 1) from exc
            refusal = unload_refusal(spec)
            if refusal is not None:
                raise CliError(
                    f"model {name} cannot be unloaded: {refusal}; let it scale to zero first "
                    f"(flexinfer scale model {name} --replicas 0)", 1,
                )  # fmt: skip
            annotations = dict((model.get("metadata") or {}).get("annotations") or {})
            return {**annotations, UNLOADED_AT_ANNOTATION: stamp}

        return self._annotate(namespace, name, change)

    def _annotate(
        self, namespace: str | None, name: str, change: Callable[[Obj], dict[str, str]]
    ) -> Obj:
        """Replace the Model's annotations with ``change(model)``, conditional on the
        resourceVersion read; read again when the controller wrote in between."""
        for attempt in range(ANNOTATE_ATTEMPTS):
            current = self.get(MODEL, namespace, name)
            body = copy.deepcopy(current)
            meta = body.setdefault("metadata", {})
            annotations = change(current)
            if annotations == (meta.get("annotations") or {}):
                return current
            meta["annotations"] = annotations
            try:
                return self.replace(MODEL, namespace, body)
            except CliError as exc:
                if not is_conflict(exc) or attempt + 1 == ANNOTATE_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    def _pod(self, namespace: str, model: str, replica: str | None) -> str:
        with _errors(self.host):
            pods = self._core.list_namespaced_pod(
                namespace, label_selector=f"{MODEL_LABEL}={model}", _request_timeout=TIMEOUT
            ).items
        names = [p.metadata.name for p in pods]
        if replica is not None:
            if replica not in names:
                raise api_error(404, f"model {namespace}/{model} has no pod {replica!r}")
            return replica
        if not pods:
            raise api_error(404, f"model {namespace}/{model} has no pods ({MODEL_LABEL}={model})")
        newest = max(pods, key=lambda p: (p.metadata.creation_timestamp or 0, p.metadata.name))
        return str(newest.metadata.name)

    def logs(self, namespace: str | None, model: str, options: LogOptions) -> Iterator[bytes]:
        """The newest (or the named) pod's log, streamed; follow keeps it open."""
        ns = self._ns(namespace)
        self.get(MODEL, ns, model)  # 404 names the Model, not a pod
        pod = self._pod(ns, model, options.replica)
        kwargs: dict[str, Any] = {"follow": options.follow, "_preload_content": False}
        if options.tail_lines is not None:
            kwargs["tail_lines"] = options.tail_lines
        with _errors(self.host):
            response = self._core.read_namespaced_pod_log(pod, ns, **kwargs)
        try:
            with _errors(self.host):
                yield from response.stream(64 * 1024)
        finally:
            response.release_conn()

    def put_benchmark(self, namespace: str, record: Obj) -> str:
        """One key of the namespace's ``flexinfer-benchmark-results`` ConfigMap, which the
        scheduler extender reads (created when missing)."""
        key = benchmark_key(record["backend"], record["model"], record["deviceClass"])
        data = {key: f"{float(record['tokensPerSecond']):.2f}"}
        name = GLOBAL_RESULTS_CONFIGMAP
        with _errors(self.host):
            try:
                self._core.patch_namespaced_config_map(
                    name, namespace, {"data": data}, _request_timeout=TIMEOUT
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise
                body = {"metadata": {"name": name, "namespace": namespace}, "data": data}
                self._core.create_namespaced_config_map(namespace, body, _request_timeout=TIMEOUT)
        return f"ConfigMap {namespace}/{name} (key {key})"

    def node_device_class(self, namespace: str, model: Obj) -> str | None:
        """The device class of the labels of the node a running pod of the Model is on."""
        name = model["metadata"]["name"]
        with _errors(self.host):
            pods = self._core.list_namespaced_pod(
                namespace, label_selector=f"{MODEL_LABEL}={name}", _request_timeout=TIMEOUT
            ).items
        nodes = sorted(
            p.spec.node_name
            for p in pods
            if p.spec is not None
            and p.spec.node_name
            and (p.status and p.status.phase) == "Running"
        )
        if not nodes:
            return None
        with _errors(self.host):
            node = self._core.read_node(nodes[0], _request_timeout=TIMEOUT)
        return device_class(node.metadata.labels or {})

    def close(self) -> None:
        """Close the connection pool."""
        self._api.close()
