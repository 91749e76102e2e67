"""Rendering k8s/ with the real ``kubectl kustomize``, as ``kubectl apply -k`` would send it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

Obj = dict[str, Any]


def kubectl() -> str:
    """The kubectl binary; the test is skipped, with the reason, where it is not installed."""
    found = shutil.which("kubectl")
    if found is None:
        pytest.skip("kubectl is not installed: the kustomize rendering cannot be checked")
    return found


def render(directory: Path) -> list[Obj]:
    """Every object ``kubectl kustomize DIRECTORY`` renders (the default load restrictor)."""
    result = subprocess.run(
        [kubectl(), "kustomize", str(directory)],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d is not None]


def render_with_components(tmp: Path, resource: Path, components: list[Path]) -> list[Obj]:
    """An overlay plus optional components, as a user's own kustomization would add them.

    kustomize takes only relative paths for bases and components, so the kustomization in
    ``tmp`` names them relative to itself.
    """
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(resource, tmp)],
        "components": [os.path.relpath(c, tmp) for c in components],
    }
    (tmp / "kustomization.yaml").write_text(yaml.safe_dump(kustomization), encoding="utf-8")
    return render(tmp)


def by_kind(objects: list[Obj], kind: str) -> dict[str, Obj]:
    """The objects of one kind, by name."""
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def selects(selector: Obj, labels: dict[str, str]) -> bool:
    """Whether a metav1.LabelSelector matches ``labels`` (an empty selector matches all)."""
    if not all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        present = key in labels
        ok = {
            "Exists": present,
            "DoesNotExist": not present,
            "In": present and labels[key] in values,
            "NotIn": not present or labels[key] not in values,
        }[op]
        if not ok:
            return False
    return True
