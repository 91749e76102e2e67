"""The HostPriorityList encoder: the same bytes ``json.dumps`` writes, for any host name."""

from __future__ import annotations

import json

import pytest

from flexinfer_scheduler.core.protocol import host_priority_list


@pytest.mark.parametrize(
    "hosts",
    [
        [],
        ["node-00001"],
        ["a", 'quote"d', "back\\slash", "tab\there", "ñode", "节点", "emoji-\U0001f680", "\x00"],
    ],
)
def test_the_encoding_is_json_dumps_byte_for_byte(hosts: list[str]) -> None:
    scores = [i % 11 for i in range(len(hosts))]
    expected = json.dumps(
        [{"host": h, "score": s} for h, s in zip(hosts, scores, strict=True)],
        separators=(",", ":"),
    ).encode()
    assert host_priority_list(hosts, scores) == expected


def test_hosts_and_scores_must_align() -> None:
    with pytest.raises(ValueError, match="shorter"):
        host_priority_list(["a", "b"], [1])
