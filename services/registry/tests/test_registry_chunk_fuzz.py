"""The client's FileChunk decoder, fuzzed against protobuf's upb parser (bounded for CI;
``bench/fuzz_registry.py`` runs the same property for as long as asked)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from flexinfer_registry.testing.chunk_fuzz import differential, messages, protobuf_backend


def test_the_reference_parser_is_upb() -> None:
    assert protobuf_backend() == "upb"


@settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(messages)
def test_decoder_agrees_with_protobuf(message: bytes) -> None:
    differential(message)
