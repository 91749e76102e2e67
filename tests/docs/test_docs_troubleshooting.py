"""docs/troubleshooting.md quotes the error codes the services really answer with."""

from __future__ import annotations

import ast
import re

from flexinfer_testing.repo import repo_root

ROOT = repo_root()
PAGE = ROOT / "docs" / "troubleshooting.md"
ANSWER = re.compile(r"^\| `(\d{3}) ([a-z_]+)`")


def _string_literals() -> set[str]:
    """Every string constant in the services' and libraries' source."""
    found = set()
    for path in [*ROOT.glob("services/*/src/**/*.py"), *ROOT.glob("libs/*/src/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)
    return found


def test_every_documented_error_code_is_one_the_code_answers() -> None:
    section = PAGE.read_text().split("## Common failures", 1)[1].split("\n## ", 1)[0]
    codes = [m.group(2) for line in section.splitlines() if (m := ANSWER.match(line))]
    assert len(codes) >= 10, "the failure table lists the proxy's answers"
    literals = _string_literals()
    assert sorted(c for c in codes if c not in literals) == []
