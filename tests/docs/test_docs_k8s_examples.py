"""k8s/examples: each manifest is one the controller's admin API accepts as it stands.

The CRD schemas and kubernetes-validate check the same files in libs/common/tests
(test_common_crd, test_common_deploy, which also renders k8s/base with kubectl kustomize);
here they go through the parser a request body goes through. ``kubectl apply
--dry-run=client`` needs an API server to discover kinds, so it cannot run offline.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flexinfer_common.api import LoRAAdapter, Model
from flexinfer_common.api.model import CacheSpec
from flexinfer_testing.doc_documents import PARSERS, api_object, validate_document
from flexinfer_testing.repo import repo_root

ROOT = repo_root()
# The examples of the kinds the admin API takes; the others (ModelCatalog and the v1alpha1
# kinds) are checked against their CRDs and types only (libs/common test_common_crd_kinds).
EXAMPLES = sorted(
    path
    for path in (ROOT / "k8s" / "examples").glob("*.yaml")
    if yaml.safe_load(path.read_text(encoding="utf-8"))["kind"] in PARSERS
)


def _objects() -> list[Model | LoRAAdapter]:
    objects = []
    for path in EXAMPLES:
        obj = api_object(path.read_text(encoding="utf-8"), "yaml")
        assert isinstance(obj, Model | LoRAAdapter)
        objects.append(obj)
    return objects


def test_there_are_examples_of_each_kind() -> None:
    kinds = {type(obj).__name__ for obj in _objects()}
    assert kinds == {"Model", "LoRAAdapter"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_accepted_by_the_admin_api_parser(path: Path) -> None:
    assert validate_document(path.read_text(encoding="utf-8"), "yaml")


def test_adapters_name_an_example_model_in_their_namespace() -> None:
    objects = _objects()
    models = {(o.metadata.namespace, o.metadata.name) for o in objects if isinstance(o, Model)}
    for adapter in (o for o in objects if isinstance(o, LoRAAdapter)):
        assert (adapter.metadata.namespace, adapter.spec.model_ref) in models, adapter.metadata


def test_the_tiny_example_reads_the_node_model_cache() -> None:
    # README and the file's comment: its source is a path in the nodes' model cache.
    (tiny,) = [o for o in _objects() if isinstance(o, Model) and o.metadata.name == "tiny"]
    cache = tiny.spec.cache or CacheSpec()
    assert tiny.spec.backend == "reference"
    assert tiny.spec.source.startswith(f"file://{cache.host_path}/"), tiny.spec.source
