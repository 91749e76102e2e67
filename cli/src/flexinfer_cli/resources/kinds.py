"""The kinds the resource commands know: names, REST plurals and table columns.

Names and columns come from the CRDs' own descriptions (``flexinfer_common.crd``), so
``flexinfer get`` and ``kubectl get`` show the same columns; the CLI adds to Model READY
(ready/desired replicas), which local clients have no Deployment to read from, RESIDENCY
and GPU (where its weights are, and the GPU its engine holds, as llama-swap's /running
shows them), and, in ``-o wide``, PINNED.
"""

from __future__ import annotations

from dataclasses import dataclass

from flexinfer_cli.resources.errors import usage_error
from flexinfer_common.api import LoRAAdapter, Model, ModelCatalog
from flexinfer_common.api.model import API_GROUP
from flexinfer_common.crd import Column, KindDescription, kind_description


@dataclass(frozen=True)
class Kind:
    """One served kind."""

    desc: KindDescription
    type: type[Model] | type[LoRAAdapter] | type[ModelCatalog]
    """The API type that validates its documents."""
    extra: tuple[tuple[int, Column], ...] = ()
    """Columns the CLI adds: (position among the CRD's columns, column)."""

    @property
    def name(self) -> str:
        """``Model``."""
        return self.desc.kind

    @property
    def plural(self) -> str:
        """``models``: the REST path segment."""
        return self.desc.plural

    @property
    def group(self) -> str:
        """``ai.flexinfer``."""
        return API_GROUP

    @property
    def version(self) -> str:
        """``v1alpha2``."""
        return self.desc.version

    @property
    def ref(self) -> str:
        """``model.ai.flexinfer``: how kubectl names the kind in its messages."""
        return f"{self.desc.singular}.{API_GROUP}"

    def columns(self, *, wide: bool) -> list[Column]:
        """The table columns after NAME (``wide`` adds the priority-1 ones)."""
        columns = [c for c in self.desc.columns if wide or c.priority == 0]
        for position, column in self.extra:
            if wide or column.priority == 0:
                columns.insert(min(position, len(columns)), column)
        return columns


READY = Column("Ready", "ready", ".status")
"""readyReplicas/desiredReplicas (a CLI-only column type)."""

RESIDENCY = Column("Residency", "string", ".status.residency")
"""Resident, Sleeping or Stopped."""
GPU = Column("GPU", "gpu", ".status.gpu")
"""node/device of the GPU a Resident or Sleeping engine holds (a CLI-only column type)."""
PINNED = Column("Pinned", "pinned", ".metadata.annotations", 1)
"""``true`` when the flexinfer.ai/pinned annotation pins it (a CLI-only column type)."""

MODEL = Kind(
    kind_description("Model"),
    Model,
    extra=((2, READY), (3, RESIDENCY), (4, GPU), (7, PINNED)),
)
LORA_ADAPTER = Kind(kind_description("LoRAAdapter"), LoRAAdapter)
MODEL_CATALOG = Kind(kind_description("ModelCatalog"), ModelCatalog)
KINDS = (MODEL, LORA_ADAPTER, MODEL_CATALOG)


def _names(kind: Kind) -> set[str]:
    desc = kind.desc
    return {desc.kind.lower(), desc.plural, desc.singular, *desc.short_names, kind.ref}


def find_kind(name: str) -> Kind:
    """The kind ``name`` means (``models``, ``model``, ``mdl``, ``Model``...); exit 2 if none."""
    wanted = name.lower()
    for kind in KINDS:
        if wanted in _names(kind) or wanted == f"{kind.plural}.{API_GROUP}":
            return kind
    raise usage_error(f"unknown resource type {name!r}; known: {known_kinds()}")


def kind_by_name(kind: str) -> Kind | None:
    """The kind a document's ``kind`` field names (exactly), or None."""
    return next((k for k in KINDS if k.name == kind), None)


def known_kinds() -> str:
    """``models (Model), loraadapters (LoRAAdapter), modelcatalogs (ModelCatalog)``."""
    return ", ".join(f"{k.plural} ({k.name})" for k in KINDS)
