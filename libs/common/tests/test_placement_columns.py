"""The columnar fast path against the per-node reference: the same decisions, to the bit.

Randomised fleets (hostile and malformed labels and annotations included, parsed as the
informer parses them, plus facts built directly with extreme floats), churned through
``NodeColumns`` (updates, deletes, reused rows, renumbered ids), then asked with random pods,
weights, benchmark tables and request name lists (duplicates and unknown names included).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from functools import partial

import pytest

from flexinfer_common.placement import (
    NodeColumns,
    NodeFacts,
    Placement,
    PluginDeps,
    PodFacts,
    ScoreContext,
    TenantShare,
    default_placement,
    normalise,
    normalise_columns,
)
from flexinfer_testing.placement_fleets import (
    NAMES,
    Sink,
    extreme_node,
    parsed_node,
    random_benchmarks,
    random_pod,
    random_weights,
    request_names,
)


def random_node(rng: random.Random, name: str, extreme: bool) -> NodeFacts:
    """A parsed node, or (in the extreme rounds, one in five) a directly built one."""
    return extreme_node(rng, name) if extreme and rng.random() < 0.2 else parsed_node(rng, name)


def churned(
    rng: random.Random, size: int, extreme: bool
) -> tuple[NodeColumns, dict[str, NodeFacts]]:
    """Columns after adds, updates and deletes, and the facts they should hold."""
    names = [f"node-{i:05d}" for i in range(size)] + NAMES
    truth = {name: random_node(rng, name, extreme) for name in names}
    table = NodeColumns(truth.values())
    for _ in range(size):
        name = rng.choice(names)
        if rng.random() < 0.3:
            table.remove(name)
            truth.pop(name, None)
        else:
            truth[name] = random_node(rng, name, extreme)
            table.upsert(truth[name])
    return table, truth


def outcome_or_error(run: Callable[[], list[int]]) -> list[int] | type[Exception]:
    """What ``run`` returns, or the type of the ValueError it raises."""
    try:
        return run()
    except ValueError as exc:
        return type(exc)


def same_floats(a: list[float], b: list[float]) -> bool:
    """Equal to the bit as far as repr tells (NaN and the sign of zero included)."""
    return list(map(repr, a)) == list(map(repr, b))


def check_one(rng: random.Random, size: int, extreme: bool) -> None:
    """One random fleet and request: the fast path agrees with the reference."""
    table, truth = churned(rng, size, extreme)
    assert len(table) == len(truth)
    assert all(table.get(name) is facts for name, facts in truth.items())
    placement = default_placement(PluginDeps(weights=random_weights(rng)))
    columnar = placement.columnar()
    assert columnar is not None
    names = request_names(rng, sorted(truth))
    rows, unknown = table.rows(names)
    assert unknown == [name for name in names if name not in truth]
    nodes = [truth[name] for name in names if name in truth]
    assert table.facts_of(rows) == nodes
    pod = random_pod(rng)

    expected = placement.filter(pod, nodes)
    got = columnar.filter(pod, table, rows)
    assert table.name[got.passed].tolist() == [node.name for node in expected.passed]
    assert list(got.failed(table).items()) == list(expected.failed.items())  # order included
    assert got.rejections == expected.rejections

    classes = sorted({node.device_class for node in truth.values()})
    seed = rng.random()
    tenant = rng.choice([None, TenantShare("t", 2.0, 2.0, rng.uniform(-10, 10))])
    ref_ctx = ScoreContext(random_benchmarks(random.Random(seed), pod, classes), tenant)
    col_ctx = ScoreContext(random_benchmarks(random.Random(seed), pod, classes), tenant)
    for scored in (rows, got.passed):  # /prioritize scores them all; a best() the passed
        ref = placement.score(pod, table.facts_of(scored), ref_ctx)
        col = columnar.score(pod, table, scored, col_ctx)
        assert same_floats(col.tolist(), ref), (pod, scored)
        fast, slow = partial(normalise_columns, col), partial(normalise, ref)
        assert outcome_or_error(fast) == outcome_or_error(slow)
    ref_sink, col_sink = ref_ctx.benchmarks.sink, col_ctx.benchmarks.sink
    assert isinstance(ref_sink, Sink)
    assert isinstance(col_sink, Sink)
    assert sorted(col_sink.reports) == sorted(ref_sink.reports)


@pytest.mark.parametrize("seed", range(8))
def test_fast_path_matches_the_reference_on_parsed_fleets(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(40):
        check_one(rng, rng.choice([0, 1, 5, 40, 300]), extreme=False)


@pytest.mark.parametrize("seed", range(4))
def test_fast_path_matches_the_reference_on_extreme_facts(seed: int) -> None:
    rng = random.Random(1000 + seed)
    for _ in range(40):
        check_one(rng, rng.choice([1, 5, 40]), extreme=True)


def test_rows_are_reused_and_ids_stay_bounded() -> None:
    table = NodeColumns()
    # A thousand nodes come and go, each with a device class never seen again.
    for i in range(1000):
        table.upsert(NodeFacts(f"n{i}", vendor="nvidia", arch=f"a{i}", device_class=f"c{i}"))
        if i >= 3:
            table.remove(f"n{i - 3}")
    assert len(table) == 3
    assert len(table.facts) <= 64  # rows of deleted nodes were taken again
    assert len(table.classes) <= 2 * 3 + 64 + 1
    assert len(table.pairs) <= 2 * 3 + 64 + 1
    rows, unknown = table.rows(["n999", "n0", "n997"])
    assert unknown == ["n0"]
    assert [table.classes[i] for i in table.device_class[rows]] == ["c999", "c997"]
    assert [table.pairs[i] for i in table.pair[rows]] == [("nvidia", "a999"), ("nvidia", "a997")]


def test_a_node_update_rewrites_its_row() -> None:
    table = NodeColumns([NodeFacts("a", free_mb=100.0), NodeFacts("b")])
    table.upsert(NodeFacts("a", vendor="amd"))
    rows, _ = table.rows(["a", "b"])
    assert table.has_vendor[rows].tolist() == [True, False]
    assert table.free_known[rows].tolist() == [False, False]
    table.replace([NodeFacts("c")])
    assert table.rows(["a", "c"])[1] == ["a"]


class PerNodeOnly:
    """A filter with no vectorised form."""

    def reasons(self, pod: PodFacts, nodes: Sequence[NodeFacts]) -> list[str | None]:
        """Every node passes."""
        return [None] * len(nodes)


def test_a_profile_with_a_per_node_plugin_has_no_columnar_form() -> None:
    assert default_placement().columnar() is not None
    assert Placement([PerNodeOnly()], []).columnar() is None
