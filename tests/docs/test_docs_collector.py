"""The docs suite's own parts: the fence collector, its markers, and how a block is run."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import kubernetes_validate
import pydantic
import pytest

from flexinfer_common.errors import InvalidSpecError
from flexinfer_controller.core.documents import MalformedDocumentError
from flexinfer_testing.doc_blocks import DocBlock, collect, parse_marker
from flexinfer_testing.doc_documents import validate_document
from flexinfer_testing.doc_stacks import CURLRC, DocStack, reader_workdir
from flexinfer_testing.stack import Stack

PAGE = """# Title

```bash
echo one
```

<!-- docs-test: skip (needs a Kubernetes cluster) -->

```python
print("two")
```

- a list item:

  ~~~yaml
  kind: x
  ~~~

<!-- docs-test: env A=1 B='two words' -->
````sh
cat <<EOF
```
EOF
````

```text
shown
```
"""


def _page(tmp_path: Path, text: str) -> tuple[list[DocBlock], list[str]]:
    (tmp_path / "page.md").write_text(text)
    found = collect(tmp_path, Path("page.md"))
    return found.blocks, found.problems


def test_blocks_have_ids_languages_and_markers(tmp_path: Path) -> None:
    blocks, problems = _page(tmp_path, PAGE)
    assert problems == []
    assert [(b.id, b.kind) for b in blocks] == [
        ("page.md:3", "shell"),
        ("page.md:9", "python"),
        ("page.md:15", "yaml"),
        ("page.md:20", "shell"),
        ("page.md:26", "shown"),
    ]
    assert blocks[0].text == "echo one\n"
    assert blocks[0].skip is None
    assert blocks[1].skip == "needs a Kubernetes cluster"
    assert blocks[2].text == "kind: x\n", "the list item's indentation is removed"
    assert blocks[3].env == (("A", "1"), ("B", "two words"))
    assert blocks[3].text == "cat <<EOF\n```\nEOF\n", "a longer fence holds a shorter one"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("<!-- docs-test: skip -->\n```bash\nx\n```\n", "needs its reason"),
        ("<!-- docs-test: skip () -->\n```bash\nx\n```\n", "needs its reason"),
        ("<!-- docs-test: ignore (why) -->\n```bash\nx\n```\n", "unknown marker"),
        ("<!-- docs-test: env A -->\n```bash\nx\n```\n", "NAME=VALUE"),
        ("<!-- docs-test: env lower=1 -->\n```bash\nx\n```\n", "NAME=VALUE"),
        ("<!-- docs-test: skip (why) -->\ntext\n```bash\nx\n```\n", "before no fence"),
        ("```bash\nx\n```\n<!-- docs-test: skip (why) -->\n", "before no fence"),
        ("text <!-- docs-test: skip (why) -->\n```bash\nx\n```\n", "its own line"),
        ("```\nx\n```\n", "no language"),
        ("```ruby\nx\n```\n", "language 'ruby'"),
        ("<!-- docs-test: env A=1 -->\n```yaml\nx: 1\n```\n", "only applies to a runnable"),
    ],
)
def test_malformed_markers_and_fences_are_problems(tmp_path: Path, text: str, problem: str) -> None:
    _, problems = _page(tmp_path, text)
    (found,) = problems
    assert problem in found


def test_a_block_whose_skip_has_no_reason_still_runs(tmp_path: Path) -> None:
    (block,), problems = _page(tmp_path, "<!-- docs-test: skip -->\n```bash\nx\n```\n")
    assert block.skip is None
    assert problems
    assert parse_marker(" skip (no GPU here) ") == ("no GPU here", ())


@pytest.fixture
def doc_stack(tmp_path: Path) -> DocStack:
    """A DocStack whose stack was never started: enough to substitute and run blocks."""
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "k8s").mkdir()
    (tmp_path / "repo" / ".flexinfer").mkdir()
    workdir = reader_workdir(tmp_path / "checkout", tmp_path / "repo")
    (workdir / ".flexinfer").mkdir()
    (tmp_path / "curl" / ".curlrc").parent.mkdir()
    (tmp_path / "curl" / ".curlrc").write_text(CURLRC)
    stack = Stack("embedded", workdir / ".flexinfer", workdir / ".flexinfer", {})
    stack.urls.update(
        proxy="http://127.0.0.1:40001",
        controller="http://127.0.0.1:40002",
        scheduler="http://127.0.0.1:40003",
        registry_http="http://127.0.0.1:40004",
        registry_grpc="127.0.0.1:40005",
    )
    return DocStack(workdir, stack, {"SHELL_SETTING": "set"}, tmp_path / "curl")


def test_the_workdir_is_the_checkout_but_for_its_data_dir(doc_stack: DocStack) -> None:
    assert (doc_stack.workdir / "k8s").is_symlink()
    assert not (doc_stack.workdir / ".flexinfer").is_symlink()
    assert (doc_stack.workdir / ".venv" / "bin" / "flexinfer").is_file()


def test_documented_addresses_become_the_stacks(doc_stack: DocStack) -> None:
    text = (
        "curl http://127.0.0.1:8080/v1/models http://127.0.0.1:8090/v1/admin/models\n"
        "mx --server localhost:8001; curl 127.0.0.1:8011/healthz 127.0.0.1:8888 :8080\n"
        "curl http://127.0.0.1:9999/ http://127.0.0.1:80801/\n"
    )
    assert doc_stack.substitute(text) == (
        "curl http://127.0.0.1:40001/v1/models http://127.0.0.1:40002/v1/admin/models\n"
        "mx --server 127.0.0.1:40005; curl 127.0.0.1:40004/healthz 127.0.0.1:40003 :8080\n"
        "curl http://127.0.0.1:9999/ http://127.0.0.1:80801/\n"
    )


def _block(text: str, lang: str = "bash") -> DocBlock:
    return DocBlock(Path("page.md"), 1, lang, text)


def test_blocks_run_in_the_workdir_with_the_shells_settings(doc_stack: DocStack) -> None:
    result = doc_stack.run(_block('test -d k8s && echo "$SHELL_SETTING $MODEL_EXPRESS_URL"\n'))
    assert (result.returncode, result.stdout) == (0, "set 127.0.0.1:40005\n"), result.report()
    result = doc_stack.run(_block("import os; print(os.getcwd())\n", "python"))
    assert result.stdout.strip() == str(doc_stack.workdir), result.report()


def test_a_failing_command_fails_the_block(doc_stack: DocStack) -> None:
    assert doc_stack.run(_block("false\necho after\n")).returncode == 1
    assert doc_stack.run(_block("false | cat\n")).returncode == 1
    assert doc_stack.run(_block("raise SystemExit(3)\n", "python")).returncode == 3


def test_a_hanging_block_is_stopped(doc_stack: DocStack) -> None:
    result = doc_stack.run(_block("cat /dev/zero > /dev/null\n"), timeout=1)
    assert result.returncode != 0
    assert "did not finish" in result.stderr


def test_processes_a_block_leaves_behind_are_killed_and_reported(doc_stack: DocStack) -> None:
    result = doc_stack.run(_block("sleep 300 >/dev/null 2>&1 &\n"))
    assert result.returncode == 0
    assert result.left_running
    assert not doc_stack.run(_block("true\n")).left_running


class _NotFound(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("Content-Length", "9")
        self.end_headers()
        self.wfile.write(b"not found")

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reads curl's output, not the server's."""


@pytest.fixture
def not_found_server() -> Iterator[str]:
    """An HTTP server on loopback that answers every GET with 404."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_curl_fails_a_block_on_an_http_error(doc_stack: DocStack, not_found_server: str) -> None:
    # Without the suite's .curlrc, curl exits 0 on a 404 and a broken example would pass.
    result = doc_stack.run(_block(f"curl -s {not_found_server}/v1/models\n"))
    assert (result.returncode, result.stdout) == (22, "not found"), result.report()


def test_documents_are_checked_by_the_project_parsers() -> None:
    model = "apiVersion: ai.flexinfer/v1alpha2\nkind: Model\nmetadata: {name: m}\n"
    with pytest.raises(InvalidSpecError, match="spec: Field required"):
        validate_document(model, "yaml")
    assert validate_document(model + "spec: {backend: reference, source: 'file:///m'}\n", "yaml")
    with pytest.raises(MalformedDocumentError, match="duplicate key"):
        validate_document(model + "metadata: {name: n}\n", "yaml")
    with pytest.raises(pydantic.ValidationError, match="param"):
        validate_document('{"error": {"message": "m", "type": "t"}}', "json")
    with pytest.raises(kubernetes_validate.ValidationError, match="replicas"):
        validate_document(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {replicas: two}\n",
            "yaml",
        )
    assert validate_document("scrape_configs: []\n", "yaml") == ["yaml (syntax)"]
