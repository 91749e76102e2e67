"""Node objects' facts parsed once per content: reused while labels and annotations are
equal, parsed again when either changes, malformed reports replayed on reuse."""

from __future__ import annotations

from flexinfer_common.placement import keys, node_facts
from flexinfer_scheduler.core.parsed import ParsedNodes

LABELS = {keys.GPU_VENDOR: "NVIDIA", keys.GPU_ARCH: "sm_89", keys.GPU_VRAM: "24Gi"}


class Sink:
    """Keeps every report."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, str]] = []

    def report(self, key: str, value: str) -> None:
        """Keep it."""
        self.reports.append((key, value))


def test_equal_metadata_reuses_the_facts_and_replays_reports() -> None:
    sink = Sink()
    parsed = ParsedNodes(sink)
    notes = {keys.GPU_FREE_MEMORY: "4000", keys.GPU_UTIL: "high"}
    (first,) = parsed.facts([("n", dict(LABELS), dict(notes))])
    (again,) = parsed.facts([("n", dict(LABELS), dict(notes))])
    assert again is first
    assert first == node_facts("n", LABELS, notes, Sink())
    assert sink.reports == [(keys.GPU_UTIL, "high")] * 2


def test_a_changed_label_or_annotation_is_parsed_again() -> None:
    parsed = ParsedNodes(Sink())
    (first,) = parsed.facts([("n", dict(LABELS), {keys.GPU_FREE_MEMORY: "4000"})])
    (relabelled,) = parsed.facts([("n", {**LABELS, keys.GPU_ARCH: "sm_60"}, {})])
    (annotated,) = parsed.facts([("n", {**LABELS, keys.GPU_ARCH: "sm_60"}, {keys.COST: "2"})])
    assert (first.arch, relabelled.arch, annotated.cost) == ("sm_89", "sm_60", 2.0)
    assert first.free_mb == 4000
    assert relabelled.free_mb is None


def test_past_the_limit_the_oldest_parse_is_forgotten() -> None:
    parsed = ParsedNodes(Sink(), limit=2)
    a, b = parsed.facts([("a", {}, {}), ("b", {}, {})])
    parsed.facts([("c", {}, {})])
    assert len(parsed) == 2
    (b_again,) = parsed.facts([("b", {}, {})])
    (a_again,) = parsed.facts([("a", {}, {})])
    assert b_again is b
    assert a_again is not a
    assert a_again == a
