"""The server's FileChunk encoder: byte-exact messages, no C API, no writes into sent bytes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import flexinfer_registry
from flexinfer_registry._generated.model_express import model_pb2
from flexinfer_registry.core.files import ChunkHeader
from flexinfer_registry.server.chunks import FileChunkBuilder

PACKAGE = Path(flexinfer_registry.__file__).parent


def _c_api_uses(path: Path) -> list[str]:
    """Where ``path`` imports ctypes or names ``pythonapi``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
        elif isinstance(node, ast.Attribute) and node.attr == "pythonapi":
            modules = ["ctypes.pythonapi"]
        else:
            continue
        found += [f"{path.name}:{node.lineno}: {m}" for m in modules if m.split(".")[0] == "ctypes"]
    return found


def test_no_module_of_the_registry_calls_into_the_c_api() -> None:
    """Writing into ``bytes`` through ctypes raced with cancellation (a use-after-free)."""
    uses = [use for path in sorted(PACKAGE.rglob("*.py")) for use in _c_api_uses(path)]
    assert uses == []


@pytest.mark.parametrize(
    "header",
    [
        ChunkHeader("model.safetensors", 4096, 1 << 33, (1 << 33) + 4096, False, False, None),
        ChunkHeader("a/b.json", 3, 0, 3, True, True, "0" * 40),
        ChunkHeader("empty.txt", 0, 0, 0, True, False, None),
        ChunkHeader("", 1, 0, 1, False, False, ""),
    ],
)
def test_built_messages_are_what_protobuf_serialises(header: ChunkHeader) -> None:
    data = bytes(i % 251 for i in range(header.size))
    builder = FileChunkBuilder(header)
    builder.data[:] = data
    expected = model_pb2.FileChunk(
        relative_path=header.relative_path,
        data=data,
        offset=header.offset,
        total_size=header.total_size,
        is_last_chunk=header.is_last_chunk,
        is_last_file=header.is_last_file,
    )
    if header.commit_hash is not None:
        expected.commit_hash = header.commit_hash
    assert builder.build() == expected.SerializeToString()


def test_a_late_write_never_reaches_a_built_message() -> None:
    """A read still running in a worker thread (its call cancelled) keeps writing into its
    view after the message was built: the message must not change, and nothing is freed
    under the writer."""
    builder = FileChunkBuilder(ChunkHeader("w.bin", 8, 0, 8, True, True, None))
    builder.data[:] = b"original"
    held = builder.data[:]  # the worker thread's view of the data field
    message = builder.build()
    held[:] = b"LATE!!!!"
    assert model_pb2.FileChunk.FromString(message).data == b"original"
    assert bytes(held) == b"LATE!!!!"  # the writer's buffer is still alive
