"""Server-side defaults of the built-in kinds, as the real apiserver fills them in.

They matter because a controller that compares what it wants with what it reads back must
ignore exactly these fields: a fake without them would let a naive comparison pass.
"""

from __future__ import annotations

import base64
import hashlib
import re
from decimal import Decimal, InvalidOperation
from typing import Any

Obj = dict[str, Any]

_PROBE = {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}


def _image_pull_policy(image: str) -> str:
    """Always for ``:latest`` or no tag (digests excepted), IfNotPresent otherwise."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    if ":" not in last or last.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


_BINARY = (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10))
_DECIMAL = (("E", 18), ("P", 15), ("T", 12), ("G", 9), ("M", 6), ("k", 3), ("", 0),
            ("m", -3), ("u", -6), ("n", -9))  # fmt: skip
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([A-Za-z]*)$")


def canonical_quantity(value: object) -> object:
    """A resource.Quantity as the apiserver stores it: ``2000m`` -> ``2``, ``0.5`` -> ``500m``,
    ``1024Mi`` -> ``1Gi`` (the largest suffix of the same family that keeps an integer).
    Values it does not understand are returned unchanged."""
    match = _QUANTITY.match(str(value))
    if match is None:
        return value
    number, suffix = match.groups()
    try:
        base = Decimal(number)
    except InvalidOperation:
        return value
    binary = dict(_BINARY)
    if suffix in binary:
        amount = base * 2 ** binary[suffix]
        if amount == amount.to_integral_value():
            for name, exp in _BINARY:
                if amount % 2**exp == 0:
                    return f"{int(amount) // 2**exp}{name}"
            return str(int(amount))
    decimal = dict(_DECIMAL)
    if suffix not in decimal:
        return value
    amount = base.scaleb(decimal[suffix])
    for name, exp in _DECIMAL:
        scaled = amount.scaleb(-exp)
        if scaled == scaled.to_integral_value():
            return f"{int(scaled)}{name}"
    return value


def _resources(resources: Obj) -> None:
    for part in ("requests", "limits"):
        values = resources.get(part)
        if isinstance(values, dict):
            resources[part] = {k: canonical_quantity(v) for k, v in values.items()}


def _probe(probe: Obj) -> None:
    for key, value in _PROBE.items():
        probe.setdefault(key, value)
    if "httpGet" in probe:
        probe["httpGet"].setdefault("scheme", "HTTP")


def _container(container: Obj) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("imagePullPolicy", _image_pull_policy(str(container.get("image", ""))))
    _resources(container.setdefault("resources", {}))
    for port in container.get("ports") or []:
        port.setdefault("protocol", "TCP")
    for key in ("livenessProbe", "readinessProbe", "startupProbe"):
        if isinstance(container.get(key), dict):
            _probe(container[key])
    for env in container.get("env") or []:
        field_ref = (env.get("valueFrom") or {}).get("fieldRef")
        if isinstance(field_ref, dict):
            field_ref.setdefault("apiVersion", "v1")


def pod_spec(spec: Obj, *, restart_policy: str | None = "Always") -> None:
    """Defaults of a PodSpec (in a Pod, or in a workload's template)."""
    if restart_policy is not None:
        spec.setdefault("restartPolicy", restart_policy)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            _container(container)
    for volume in spec.get("volumes") or []:
        for source in ("configMap", "secret"):
            if isinstance(volume.get(source), dict):
                volume[source].setdefault("defaultMode", 420)


def deployment(obj: Obj, old: Obj | None) -> None:
    """apps/v1 Deployment defaults."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    strategy = spec.setdefault("strategy", {"type": "RollingUpdate"})
    if strategy.get("type", "RollingUpdate") == "RollingUpdate":
        strategy.setdefault("type", "RollingUpdate")
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxUnavailable", "25%")
        rolling.setdefault("maxSurge", "25%")
    template = spec.setdefault("template", {})
    # What the Go apiserver serialises for the template's unset creationTimestamp.
    template.setdefault("metadata", {}).setdefault("creationTimestamp", None)
    pod_spec(template.setdefault("spec", {}))


def job(obj: Obj, old: Obj | None) -> None:
    """batch/v1 Job defaults (its pods have no default restartPolicy: Always is invalid)."""
    spec = obj.setdefault("spec", {})
    for key, value in (
        ("parallelism", 1),
        ("completions", 1),
        ("backoffLimit", 6),
        ("completionMode", "NonIndexed"),
        ("suspend", False),
    ):
        spec.setdefault(key, value)
    pod_spec(spec.setdefault("template", {}).setdefault("spec", {}), restart_policy=None)


def pod(obj: Obj, old: Obj | None) -> None:
    """core/v1 Pod defaults."""
    pod_spec(obj.setdefault("spec", {}))


def service(obj: Obj, old: Obj | None) -> None:
    """core/v1 Service defaults; the cluster IP is kept across updates that omit it."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
    if spec.get("clusterIP") == "None":
        return  # headless
    before = (old or {}).get("spec") or {}
    uid = str(obj["metadata"].get("uid", ""))
    digest = hashlib.sha256(uid.encode()).digest()
    ip = before.get("clusterIP") or f"10.96.{digest[0]}.{max(digest[1], 1)}"
    spec.setdefault("clusterIP", ip)
    spec.setdefault("clusterIPs", [spec["clusterIP"]])
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")


def persistent_volume_claim(obj: Obj, old: Obj | None) -> None:
    """core/v1 PersistentVolumeClaim defaults."""
    obj.setdefault("spec", {}).setdefault("volumeMode", "Filesystem")


def secret(obj: Obj, old: Obj | None) -> None:
    """core/v1 Secret: type Opaque; ``stringData`` is write-only, folded into base64 ``data``."""
    obj.setdefault("type", "Opaque")
    string_data = obj.pop("stringData", None) or {}
    data = obj.setdefault("data", {})
    for key, value in string_data.items():
        data[key] = base64.b64encode(str(value).encode()).decode()
    if not data:
        obj.pop("data")
