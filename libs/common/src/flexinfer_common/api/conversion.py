"""ModelDeployment (v1alpha1) <-> Model (v1alpha2), lossless both ways.

:mod:`conversion_fields` maps the fields that have a counterpart. Whatever that mapping does
not bring back (a field the other version lacks, a value it clamps or respells) is kept, as
compact JSON, in an annotation of the converted object: ``flexinfer.ai/v1alpha1-spec`` on a
Model made from a ModelDeployment, ``flexinfer.ai/v1alpha2-spec`` on a ModelDeployment made
from a Model. Converting back applies it, so a round trip returns the original exactly.

The annotation also holds a digest of each converted part (spec, status). When the object
was changed since (its part no longer matches the digest), only the kept values of fields
that the mapping leaves unset are applied: an edit to a mapped field is never overwritten.
Metadata is copied as it is (finalizers included), as a Kubernetes conversion would.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from flexinfer_common.api.conversion_fields import (
    spec_to_v1,
    spec_to_v2,
    status_to_v1,
    status_to_v2,
)
from flexinfer_common.api.meta import ObjectMeta
from flexinfer_common.api.model import Model
from flexinfer_common.api.modeldeployment import ModelDeployment
from flexinfer_common.errors import InvalidSpecError

V1ALPHA1_ANNOTATION = "flexinfer.ai/v1alpha1-spec"
"""On a Model converted from a ModelDeployment: what the v1alpha2 fields cannot hold."""
V1ALPHA2_ANNOTATION = "flexinfer.ai/v1alpha2-spec"
"""On a ModelDeployment converted from a Model: what the v1alpha1 fields cannot hold."""

Doc = dict[str, Any]
Obj = TypeVar("Obj", Model, ModelDeployment)
_PARTS = ("spec", "status")


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _digest(part: Doc) -> str:
    return hashlib.sha256(_json(part).encode()).hexdigest()[:16]


def _dump(obj: BaseModel) -> Doc:
    return obj.model_dump(mode="json", by_alias=True)


def _build(kind: type[Obj], meta: ObjectMeta, body: Doc) -> Obj:
    """Validate a converted object; a target that cannot be valid is an InvalidSpecError."""
    try:
        return kind.model_validate({"metadata": _dump(meta), **body})
    except ValidationError as exc:
        raise InvalidSpecError(f"cannot convert to {kind.__name__}: {exc}") from exc


def _without(meta: ObjectMeta, key: str) -> ObjectMeta:
    annotations = {k: v for k, v in meta.annotations.items() if k != key}
    return meta.model_copy(update={"annotations": annotations})


def _residual(original: Doc, back: Doc, converted: Doc) -> Doc:
    """The parts of ``original`` that ``back`` (its plain round trip) lost, with digests."""
    kept: Doc = {}
    for part in _PARTS:
        lost = {k: v for k, v in original[part].items() if back[part].get(k) != v}
        if lost:
            kept[part] = lost
    if kept:
        kept["digest"] = {part: _digest(converted[part]) for part in _PARTS}
    return kept


def _restore(body: Doc, source: Doc, annotation: str | None) -> Doc:
    """``body`` (a plain conversion of ``source``) with the kept values of ``annotation``."""
    if not annotation:
        return body
    try:
        kept = json.loads(annotation)
    except json.JSONDecodeError as exc:
        raise InvalidSpecError(f"conversion annotation is not JSON: {exc}") from exc
    digests = kept.get("digest", {})
    out = {part: dict(body[part]) for part in _PARTS}
    for part in _PARTS:
        unchanged = digests.get(part) == _digest(source[part])
        for key, value in kept.get(part, {}).items():
            if unchanged or out[part].get(key) is None:
                out[part][key] = value
    return out


def _plain(obj: Model | ModelDeployment) -> Doc:
    """The plain mapping of ``obj`` into the other version, as JSON parts."""
    if isinstance(obj, Model):
        return {"spec": spec_to_v1(obj.spec), "status": status_to_v1(obj.status)}
    return {"spec": spec_to_v2(obj.spec), "status": status_to_v2(obj.status)}


def _plain_back(converted: Model | ModelDeployment) -> Doc:
    """What the plain mapping brings back of ``converted``, validated as the other kind."""
    kind: type[Model | ModelDeployment] = ModelDeployment if isinstance(converted, Model) else Model
    try:
        back = kind.model_validate({"metadata": _dump(converted.metadata), **_plain(converted)})
    except ValidationError:
        return {part: {} for part in _PARTS}  # nothing comes back: every field is kept
    return _dump(back)


def _convert(obj: Model | ModelDeployment, target: type[Obj], keys: tuple[str, str]) -> Obj:
    """Either direction: keys = (the annotation read from obj, the one written on the result)."""
    incoming, outgoing = keys
    source = _dump(obj)
    meta = obj.metadata
    body = _restore(_plain(obj), source, meta.annotations.get(incoming))
    converted = _build(target, _without(meta, incoming), body)
    if incoming in meta.annotations:
        return converted  # a round trip back: nothing more to keep
    kept = _residual(source, _plain_back(converted), _dump(converted))
    if not kept:
        return converted
    annotations = {**converted.metadata.annotations, outgoing: _json(kept)}
    return converted.model_copy(
        update={"metadata": converted.metadata.model_copy(update={"annotations": annotations})}
    )


def to_model(deployment: ModelDeployment) -> Model:
    """The v1alpha2 Model of a v1alpha1 ModelDeployment (raises InvalidSpecError)."""
    return _convert(deployment, Model, (V1ALPHA2_ANNOTATION, V1ALPHA1_ANNOTATION))


def to_model_deployment(model: Model) -> ModelDeployment:
    """The v1alpha1 ModelDeployment of a v1alpha2 Model (raises InvalidSpecError)."""
    return _convert(model, ModelDeployment, (V1ALPHA1_ANNOTATION, V1ALPHA2_ANNOTATION))
