"""The selective merge: compare and write only the fields the controller owns.

The apiserver fills in defaults (strategy details, revisionHistoryLimit,
terminationMessagePath, probe successThreshold, port protocols, a Service's clusterIP...)
and other actors add labels and annotations. Comparing whole objects would see a change on
every reconcile and update forever. So each kind has a list of owned fields, compared with
three rules:

* nil equals empty: a field the controller does not set equals ``{}``, ``[]`` or absent;
* inside an owned field, keys the controller did not write are the server's defaults and
  are ignored, while every key it wrote must match (quantities by value);
* labels and annotations are shared: only the controller's own keys are compared and
  written; node selectors and selectors are maps the controller owns whole.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any

from flexinfer_controller.runtime.kubernetes import quantity
from flexinfer_controller.runtime.kubernetes.names import Obj


class ByName(str):
    """A path step into a list of named items (containers), by their ``name``."""

    __slots__ = ()


class Mode(Enum):
    """How one owned field is compared and written."""

    OWNED = "owned"
    """Compared with nil-equals-empty and defaults ignored; written whole."""
    MAP = "map"
    """As OWNED, and the keys must be the same (no stale extra entries)."""
    SHARED = "shared"
    """Only the controller's keys compared and written (labels, annotations)."""
    NAMES = "names"
    """The names of a list of named items; a difference replaces the whole list."""


@dataclass(frozen=True)
class Field:
    """One owned field: its reported name, where it is, how it is compared."""

    name: str
    path: tuple[str, ...]
    mode: Mode = Mode.OWNED
    quantities: bool = False


_POD = ("spec", "template", "spec")
CONTAINER_FIELDS = (
    "image", "imagePullPolicy", "command", "args", "env", "ports", "resources",
    "readinessProbe", "startupProbe", "livenessProbe", "lifecycle", "volumeMounts",
    "securityContext",
)  # fmt: skip
POD_FIELDS = (
    ("volumes", Mode.OWNED), ("tolerations", Mode.OWNED), ("affinity", Mode.OWNED),
    ("nodeSelector", Mode.MAP), ("enableServiceLinks", Mode.OWNED),
    ("securityContext", Mode.OWNED), ("serviceAccountName", Mode.OWNED),
)  # fmt: skip


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, dict | list) and not value)


def covers(desired: Any, live: Any, quantities: bool = False) -> bool:
    """Whether ``live`` holds everything ``desired`` sets (nil equals empty)."""
    if _empty(desired):
        return _empty(live)
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(
            covers(value, live.get(key), quantities) for key, value in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(desired) == len(live)
            and all(covers(d, v, quantities) for d, v in zip(desired, live, strict=True))
        )
    if quantities:
        return quantity.equal(desired, live)
    return bool(desired == live) and type(desired) is type(live)


def get(obj: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path`` (None where any step is missing)."""
    for step in path:
        if isinstance(step, ByName):
            obj = next(
                (i for i in obj or [] if isinstance(i, dict) and i.get("name") == step), None
            )
        elif isinstance(obj, dict):
            obj = obj.get(step)
        else:
            return None
    return obj


def put(obj: Obj, path: tuple[str, ...], value: Any) -> None:
    """Set (or, for None, remove) the value at ``path``, creating parents."""
    parent: Any = obj
    for step in path[:-1]:
        parent = get(parent, (step,)) if isinstance(step, ByName) else parent.setdefault(step, {})
    if value is None:
        parent.pop(path[-1], None)
    else:
        parent[path[-1]] = copy.deepcopy(value)


def _metadata_fields() -> list[Field]:
    return [
        Field("metadata.labels", ("metadata", "labels"), Mode.SHARED),
        Field("metadata.annotations", ("metadata", "annotations"), Mode.SHARED),
        Field("metadata.ownerReferences", ("metadata", "ownerReferences")),
    ]


def _container_fields(desired: Obj, kind: str) -> Iterator[Field]:
    base = (*_POD, kind)
    yield Field(f"{'.'.join(base)}[*].name", base, Mode.NAMES)
    for container in get(desired, base) or []:
        name = ByName(container["name"])
        for attr in CONTAINER_FIELDS:
            label = f"{'.'.join(base)}[{name}].{attr}"
            yield Field(label, (*base, name, attr), quantities=attr == "resources")


def deployment_fields(desired: Obj) -> list[Field]:
    """The Deployment fields the controller owns (containers: per rendered container)."""
    fields = _metadata_fields()
    fields += [
        Field("spec.replicas", ("spec", "replicas")),
        Field("spec.selector", ("spec", "selector", "matchLabels"), Mode.MAP),
        Field("spec.strategy", ("spec", "strategy")),
        Field(
            "spec.template.metadata.labels", ("spec", "template", "metadata", "labels"), Mode.SHARED
        ),
        Field(
            "spec.template.metadata.annotations",
            ("spec", "template", "metadata", "annotations"),
            Mode.SHARED,
        ),
    ]
    fields += [
        Field(f"spec.template.spec.{name}", (*_POD, name), mode) for name, mode in POD_FIELDS
    ]
    fields += [
        *_container_fields(desired, "initContainers"),
        *_container_fields(desired, "containers"),
    ]
    return fields


def service_fields(desired: Obj) -> list[Field]:
    """The Service fields the controller owns (never clusterIP and the like)."""
    return [
        *_metadata_fields(),
        Field("spec.type", ("spec", "type")),
        Field("spec.selector", ("spec", "selector"), Mode.MAP),
        Field("spec.ports", ("spec", "ports")),
    ]


def pdb_fields(desired: Obj) -> list[Field]:
    """The PodDisruptionBudget fields the controller owns."""
    return [
        *_metadata_fields(),
        Field("spec.maxUnavailable", ("spec", "maxUnavailable")),
        Field("spec.selector", ("spec", "selector", "matchLabels"), Mode.MAP),
    ]


def config_map_fields(desired: Obj) -> list[Field]:
    """The ConfigMap fields the controller owns."""
    return [*_metadata_fields(), Field("data", ("data",), Mode.MAP)]


def metadata_only_fields(desired: Obj) -> list[Field]:
    """PVCs (their spec is immutable but for a resize) and Jobs (immutable template)."""
    return _metadata_fields()


FIELDS = {
    "Deployment": deployment_fields,
    "Service": service_fields,
    "PodDisruptionBudget": pdb_fields,
    "ConfigMap": config_map_fields,
    "PersistentVolumeClaim": metadata_only_fields,
    "Job": metadata_only_fields,
}


def owned_fields(desired: Obj) -> list[Field]:
    """The owned fields of ``desired``'s kind."""
    return FIELDS[str(desired["kind"])](desired)


def matches(field: Field, desired: Obj, live: Obj) -> bool:
    """Whether ``live`` agrees with ``desired`` on one owned field."""
    want, have = get(desired, field.path), get(live, field.path)
    if field.mode is Mode.SHARED:
        return all(isinstance(have, dict) and have.get(k) == v for k, v in (want or {}).items())
    if field.mode is Mode.NAMES:
        return [c.get("name") for c in want or []] == [c.get("name") for c in have or []]
    if field.mode is Mode.MAP and set(want or {}) != set(have or {}):
        return False
    return covers(want, have, field.quantities)


def needs_update(desired: Obj, live: Obj) -> list[str]:
    """The owned fields where ``live`` differs from ``desired`` (empty: leave it alone)."""
    return [f.name for f in owned_fields(desired) if not matches(f, desired, live)]


def merge(desired: Obj, live: Obj) -> Obj:
    """``live`` with the owned fields of ``desired`` written onto it, the rest kept
    (resourceVersion included, so an update of it is a compare-and-swap)."""
    out = copy.deepcopy(live)
    out.pop("status", None)
    for field in owned_fields(desired):
        # Compared against ``out``: a replaced container list makes its fields agree.
        if matches(field, desired, out):
            continue
        want = get(desired, field.path)
        if field.mode is Mode.SHARED:
            put(out, field.path, {**(get(out, field.path) or {}), **(want or {})})
        else:
            put(out, field.path, want)
    return out
