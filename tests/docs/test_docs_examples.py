"""Every example in README.md and docs/*.md works as written.

Each fenced block is one test, named by file and line. Shell and Python blocks run, in
document order, against a real ``flexinfer up`` with its demo (flexinfer_testing.doc_stacks
says how a block sees it); after each one the demo model must still answer, so that
running the examples in order never breaks the demo. YAML and JSON blocks are parsed and
validated by the project's own parsers. A block that cannot run here carries a
``docs-test: skip (why)`` marker, and the report shows why (flexinfer_testing.doc_blocks).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flexinfer_controller.core.documents import Format
from flexinfer_testing.doc_blocks import DocBlock, MarkdownBlocks, collect, markdown_files
from flexinfer_testing.doc_documents import validate_document
from flexinfer_testing.doc_stacks import DocStacks
from flexinfer_testing.repo import repo_root

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

ROOT = repo_root()
PAGES = markdown_files(ROOT)


def _collected() -> dict[Path, MarkdownBlocks]:
    return {page: collect(ROOT, page) for page in PAGES}


def _blocks(*kinds: str) -> list[DocBlock]:
    """The blocks of ``kinds`` in every page, in document order."""
    return [block for page in _collected().values() for block in page.blocks if block.kind in kinds]


def _params(*kinds: str) -> list[object]:
    """The blocks of ``kinds`` as test parameters; a skip marker makes a pytest skip."""
    return [
        pytest.param(
            block, id=block.id, marks=[pytest.mark.skip(reason=f"{block.id}: {block.skip}")]
        )
        if block.skip
        else pytest.param(block, id=block.id)
        for block in _blocks(*kinds)
    ]


@pytest.fixture(scope="module")
def doc_stacks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DocStacks]:
    """The stacks the blocks run against; every one is stopped, and checked, at the end."""
    stacks = DocStacks(tmp_path_factory.mktemp("docs"), ROOT)
    try:
        yield stacks
    finally:
        stacks.close()
    assert not stacks.errors, "\n".join(stacks.errors)


@pytest.mark.parametrize("page", PAGES, ids=str)
def test_markers_and_fences_are_well_formed(page: Path) -> None:
    assert collect(ROOT, page).problems == []


def test_the_pages_have_runnable_examples() -> None:
    runnable = [block for block in _blocks("shell", "python") if block.skip is None]
    assert len(runnable) >= 5, "the docs suite would prove nothing without examples to run"


@pytest.mark.parametrize("block", _params("shell", "python"))
def test_example_runs(block: DocBlock, doc_stacks: DocStacks) -> None:
    stack = doc_stacks.for_block(block)
    result = stack.run(block)
    assert result.returncode == 0, f"{block.id} failed as written:\n{result.report()}"
    assert not result.left_running, f"{block.id} left processes running (killed)"
    stack.check_demo()


@pytest.mark.parametrize("block", _params("yaml", "json"))
def test_document_is_valid(block: DocBlock) -> None:
    fmt: Format = "json" if block.kind == "json" else "yaml"
    assert validate_document(block.text, fmt)
