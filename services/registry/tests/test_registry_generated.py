"""The committed gRPC stubs are exactly what proto/generate.sh makes from proto/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import flexinfer_registry._generated as generated
from flexinfer_testing.repo import repo_root


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_regenerated_stubs_are_identical(tmp_path: Path) -> None:
    root = repo_root()
    env = {**os.environ, "PYTHON": sys.executable}
    subprocess.run(
        ["bash", str(root / "proto" / "generate.sh"), str(tmp_path)],
        check=True,
        env=env,
        capture_output=True,
        timeout=120,
    )
    committed = _files(Path(generated.__file__).parent)
    fresh = _files(tmp_path)
    assert sorted(fresh) == sorted(committed)
    for name, content in fresh.items():
        assert committed[name] == content, f"{name} is stale: run proto/generate.sh"


def test_every_proto_has_stubs() -> None:
    protos = sorted((repo_root() / "proto" / "model_express").glob("*.proto"))
    assert protos
    package = Path(generated.__file__).parent / "model_express"
    for proto in protos:
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
            assert (package / f"{proto.stem}{suffix}").is_file(), f"{proto.name}: {suffix}"
