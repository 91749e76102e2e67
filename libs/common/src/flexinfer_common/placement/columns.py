"""Node facts as columns: one row per node, one numpy array per fact, kept as nodes change.

A decision over a thousand nodes that reads each ``NodeFacts`` in Python pays a bytecode
loop per node per filter and per score term. Here the facts a decision reads are laid out
once per node change (the informer's event, not the request), so the plugins' vectorised
forms (``plugins.ColumnFilter``, ``plugins.ColumnScorer``) decide a request in a few array
operations over the requested rows. What a plugin needs per distinct value rather than per
node (the architecture verdict, the TPS of a device class) is keyed by small integer ids:
``pair`` indexes ``pairs`` (vendor, arch), ``device_class`` indexes ``classes``.

A node keeps its row while it lives; a deleted node's row is reused by the next new one.
The rows of a request are only meaningful until the next change, so a caller reads them
and decides without awaiting in between (the informers change them on the same loop).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from json.encoder import encode_basestring_ascii
from operator import itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from flexinfer_common.placement.facts import NodeFacts

Rows = npt.NDArray[np.intp]
"""Row numbers of a request's nodes, in the request's order."""
Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]
Pair = tuple[str | None, str | None]

_INITIAL_ROWS = 64
_COMPACT_SLACK = 64
"""Distinct (vendor, arch) pairs or device classes past twice the live nodes plus this are
renumbered from the live nodes: values seen once and gone must not grow the tables forever."""
_COLUMNS: tuple[tuple[str, type], ...] = (
    ("name", object),
    ("name_json", object),
    ("has_vendor", np.bool_),
    ("free_known", np.bool_),
    ("free_mb", np.float64),
    ("free_text", object),
    ("util", np.float64),
    ("cost", np.float64),
    ("cache_usage", np.float64),
    ("free_ratio", np.float64),
    ("pair", np.intp),
    ("device_class", np.intp),
)


class _Interned:
    """Distinct values -> small ids, in the order first seen."""

    def __init__(self) -> None:
        self.values: list[object] = []
        self._ids: dict[object, int] = {}

    def id(self, value: object) -> int:
        """The value's id (a new one for a value not seen)."""
        found = self._ids.get(value)
        if found is None:
            found = self._ids[value] = len(self.values)
            self.values.append(value)
        return found


class NodeColumns:
    """Node name -> row, and per row the facts placement reads, as arrays."""

    name: npt.NDArray[np.object_]
    name_json: npt.NDArray[np.object_]
    """The name as a JSON string literal: answers that list nodes join these."""
    has_vendor: Bools
    """Whether the node has a (non-empty) vendor."""
    free_known: Bools
    free_mb: Floats
    """The free VRAM where ``free_known``; 0 elsewhere (not read there)."""
    free_text: npt.NDArray[np.object_]
    """``free_mb`` as the free-VRAM filter's reason prints it (``:g``), formatted once."""
    util: Floats
    cost: Floats
    cache_usage: Floats
    free_ratio: Floats
    pair: Rows
    """Index of the node's (vendor, arch) in ``pairs``."""
    device_class: Rows
    """Index of the node's device class in ``classes``."""

    def __init__(self, nodes: Iterable[NodeFacts] = ()) -> None:
        self.replace(nodes)

    @property
    def pairs(self) -> list[Pair]:
        """The distinct (vendor, arch) of the nodes, by id (ids of gone nodes included)."""
        return self._pairs.values  # type: ignore[return-value]

    @property
    def classes(self) -> list[str]:
        """The distinct device classes of the nodes, by id (ids of gone nodes included)."""
        return self._classes.values  # type: ignore[return-value]

    def replace(self, nodes: Iterable[NodeFacts]) -> None:
        """Drop every node and hold ``nodes`` instead (a fresh listing)."""
        self._rows: dict[str, int] = {}
        self._spare: list[int] = []
        self.facts: list[NodeFacts | None] = []
        """Each row's facts (None: a spare row)."""
        self._pairs, self._classes = _Interned(), _Interned()
        for column, dtype in _COLUMNS:
            setattr(self, column, np.zeros(0, dtype=dtype))
        self._resize(_INITIAL_ROWS)
        for node in nodes:
            self.upsert(node)

    def _resize(self, size: int) -> None:
        for column, dtype in _COLUMNS:
            old = getattr(self, column)
            new: npt.NDArray[Any] = np.zeros(size, dtype=dtype)
            new[: len(old)] = old
            setattr(self, column, new)
        self._spare.extend(range(size - 1, len(self.facts) - 1, -1))  # lowest row first
        self.facts.extend([None] * (size - len(self.facts)))

    def upsert(self, node: NodeFacts) -> None:
        """Add a node, or replace the facts of the node of that name in its row."""
        row = self._rows.get(node.name)
        if row is None:
            if not self._spare:
                self._resize(2 * len(self.facts))
            row = self._rows[node.name] = self._spare.pop()
        self._write(row, node)
        limit = 2 * len(self._rows) + _COMPACT_SLACK
        if len(self._pairs.values) > limit or len(self._classes.values) > limit:
            self._renumber()

    def _write(self, row: int, node: NodeFacts) -> None:
        known = node.free_mb is not None
        self.facts[row] = node
        self.name[row] = node.name
        self.name_json[row] = encode_basestring_ascii(node.name)
        self.has_vendor[row] = bool(node.vendor)
        self.free_known[row] = known
        self.free_mb[row] = node.free_mb if node.free_mb is not None else 0.0
        self.free_text[row] = f"{node.free_mb:g}" if node.free_mb is not None else ""
        self.util[row] = node.util
        self.cost[row] = node.cost
        self.cache_usage[row] = node.cache_usage
        self.free_ratio[row] = node.free_ratio
        self.pair[row] = self._pairs.id((node.vendor, node.arch))
        self.device_class[row] = self._classes.id(node.device_class)

    def _renumber(self) -> None:
        self._pairs, self._classes = _Interned(), _Interned()
        for row in self._rows.values():
            node = self.facts[row]
            assert node is not None
            self.pair[row] = self._pairs.id((node.vendor, node.arch))
            self.device_class[row] = self._classes.id(node.device_class)

    def remove(self, name: str) -> None:
        """Forget a node (deleted); its row is reused. Unknown names are ignored."""
        row = self._rows.pop(name, None)
        if row is not None:
            self.facts[row] = None
            self._spare.append(row)

    def get(self, name: str) -> NodeFacts | None:
        """The node's facts; None if not held."""
        row = self._rows.get(name)
        return None if row is None else self.facts[row]

    def rows(self, names: Sequence[str]) -> tuple[Rows, list[str]]:
        """The rows of the names held, in order, and the names not held."""
        lookup = self._rows
        try:
            # itemgetter looks every name up in one C loop (map calls back per name).
            found = itemgetter(*names)(lookup) if len(names) > 1 else [lookup[n] for n in names]
            return np.fromiter(found, np.intp, len(names)), []
        except KeyError:
            found = [lookup.get(name) for name in names]
            known = [row for row in found if row is not None]
            unknown = [name for name, row in zip(names, found, strict=True) if row is None]
            return np.array(known, dtype=np.intp), unknown

    def facts_of(self, rows: Rows) -> list[NodeFacts]:
        """The facts of these rows, in order (the per-node reference path's input)."""
        facts = self.facts
        return [node for row in rows.tolist() if (node := facts[row]) is not None]

    def __len__(self) -> int:
        return len(self._rows)
