"""The answers' encoders: the same bytes ``json.dumps`` writes, for any host name or reason."""

from __future__ import annotations

import json

import pytest

from flexinfer_scheduler.core.protocol import filter_result, host_priority_list

HOSTILE = ["a", 'quote"d', "back\\slash", "tab\there", "ñode", "节点", "emoji-\U0001f680", "\x00"]


@pytest.mark.parametrize(
    "hosts",
    [
        [],
        ["node-00001"],
        HOSTILE,
    ],
)
def test_the_encoding_is_json_dumps_byte_for_byte(hosts: list[str]) -> None:
    scores = [i % 11 for i in range(len(hosts))]
    expected = json.dumps(
        [{"host": h, "score": s} for h, s in zip(hosts, scores, strict=True)],
        separators=(",", ":"),
    ).encode()
    assert host_priority_list(hosts, scores) == expected


@pytest.mark.parametrize("scores", [[7], [-3, 12], [10**12, 0, 10, 11], [5] * 40])
def test_any_integer_score_is_written_as_json_dumps_does(scores: list[int]) -> None:
    # The extender's own scores are 0..10; the encoder writes whatever it is given.
    hosts = [f"n{i}" for i in range(len(scores))]
    expected = json.dumps(
        [{"host": h, "score": s} for h, s in zip(hosts, scores, strict=True)],
        separators=(",", ":"),
    ).encode()
    assert host_priority_list(hosts, scores) == expected


def test_hosts_and_scores_must_align() -> None:
    with pytest.raises(ValueError, match="2 hosts but 1 scores"):
        host_priority_list(["a", "b"], [1])


@pytest.mark.parametrize("passed", [[], ["node-00001"], HOSTILE])
def test_the_filter_result_is_json_dumps_byte_for_byte(passed: list[str]) -> None:
    failed = {name[::-1] + "x": f"reason {name}" for name in HOSTILE[: len(passed)]}
    expected = json.dumps(
        {"nodenames": passed, "failedNodes": failed, "failedAndUnresolvableNodes": {}},
        separators=(",", ":"),
    ).encode()
    names = [json.dumps(name) for name in failed]
    assert (
        filter_result([json.dumps(name) for name in passed], names, [*failed.values()]) == expected
    )


def test_failed_names_and_reasons_must_align() -> None:
    with pytest.raises(ValueError, match="2 failed nodes but 1 reasons"):
        filter_result([], ['"a"', '"b"'], ["r"])


def test_repeated_reasons_are_written_for_every_node() -> None:
    # The same reason object for many nodes (one filter's) is written for each of them.
    failed = {f"n{i}": HOSTILE[i % 3] for i in range(10)} | {"last": "only once"}
    expected = json.dumps(
        {"nodenames": ["a"], "failedNodes": failed, "failedAndUnresolvableNodes": {}},
        separators=(",", ":"),
    ).encode()
    names = [json.dumps(name) for name in failed]
    assert filter_result(['"a"'], names, list(failed.values())) == expected
