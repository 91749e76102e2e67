"""The fenced blocks of the repository's Markdown, and the markers that say how to test them.

Every fence must name its language, so that each block falls in one of three groups: a
*runnable* block (``bash``, ``python``) that the docs suite runs, a *document* (``yaml``,
``json``) that it parses and validates, or *shown* text (``text``, ``console``) that it
leaves alone. An HTML comment on the line before a fence (blank lines between are allowed)
tells the suite more; it is invisible where the Markdown is rendered:

- ``<!-- docs-test: skip (why) -->``: the block cannot run here; the reason is required and
  is what the test report shows.
- ``<!-- docs-test: env NAME=VALUE ... -->``: the block runs in a shell with these settings,
  against a stack started from that shell (``shlex`` quoting). Consecutive blocks with the
  same settings share that stack; blocks without a marker run against the file's plain one.

A marker that is malformed, or that no fence follows, is a problem the suite reports.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path

RUNNABLE = {"bash": "shell", "sh": "shell", "shell": "shell", "python": "python"}
"""Languages a reader runs, and how the suite runs them."""
DOCUMENTS = {"yaml": "yaml", "yml": "yaml", "json": "json"}
"""Languages of documents (manifests, configs, bodies): parsed and validated, not run."""
SHOWN = {"text", "console", "output"}
"""Languages of output shown to the reader: neither run nor parsed."""

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[^`\s]*)[^`]*$")
_MARKER = re.compile(r"^\s*<!--\s*docs-test:(?P<body>.*?)-->\s*$")
_SKIP = re.compile(r"^skip\s*\((?P<reason>[^()]*\S[^()]*)\)$")
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


@dataclass(frozen=True)
class DocBlock:
    """One fenced block: where it is, what it holds, and how the suite treats it."""

    path: Path
    """The Markdown file, relative to the repository root."""
    line: int
    """1-based line of the opening fence."""
    lang: str
    """The fence's language, lowercased."""
    text: str
    """The block's content, without the fences and their indentation."""
    skip: str | None = None
    """Why the block cannot run here (its skip marker), or None."""
    env: tuple[tuple[str, str], ...] = ()
    """Settings of the shell (and the stack) the block runs in, sorted by name."""

    @property
    def id(self) -> str:
        """``README.md:21``: the test id, naming file and line."""
        return f"{self.path.as_posix()}:{self.line}"

    @property
    def kind(self) -> str:
        """``shell``, ``python``, ``yaml``, ``json`` or ``shown``."""
        return RUNNABLE.get(self.lang) or DOCUMENTS.get(self.lang) or "shown"


@dataclass
class MarkdownBlocks:
    """The blocks of one Markdown file and the problems found in its markers and fences."""

    blocks: list[DocBlock] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass
class _Marker:
    line: int
    skip: str | None = None
    env: tuple[tuple[str, str], ...] = ()


def parse_marker(body: str) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """The skip reason or the env settings a marker's body declares; ValueError if malformed."""
    body = body.strip()
    if body.startswith("skip"):
        match = _SKIP.match(body)
        if match is None:
            raise ValueError(f"'{body}' needs its reason: docs-test: skip (why it cannot run)")
        return match["reason"].strip(), ()
    if body.startswith("env"):
        words = shlex.split(body[3:])
        pairs = [word.partition("=") for word in words]
        bad = [word for word, (name, eq, _) in zip(words, pairs, strict=True) if not eq]
        bad += [name for name, eq, _ in pairs if eq and not _ENV_NAME.match(name)]
        if not words or bad:
            raise ValueError(f"'{body}': env takes NAME=VALUE settings, not {bad or 'nothing'}")
        return None, tuple(sorted((name, value) for name, _, value in pairs))
    raise ValueError(f"unknown marker '{body}': use 'skip (why)' or 'env NAME=VALUE ...'")


def collect(root: Path, relative: Path) -> MarkdownBlocks:
    """The fenced blocks of ``root/relative``, in document order."""
    lines = (root / relative).read_text(encoding="utf-8").splitlines()
    found = MarkdownBlocks()
    marker: _Marker | None = None
    index = 0
    while index < len(lines):
        line, number = lines[index], index + 1
        fence = _FENCE.match(line)
        if fence is None:
            marker = _track_marker(line, number, marker, relative, found)
            index += 1
            continue
        end = _closing(lines, index, fence["fence"])
        body = [_dedent(text, len(fence["indent"])) for text in lines[index + 1 : end]]
        block = DocBlock(relative, number, fence["lang"].lower(), "\n".join(body) + "\n")
        if marker is not None:
            block = replace(block, skip=marker.skip, env=marker.env)
        _check_language(block, found)
        found.blocks.append(block)
        marker = None
        index = end + 1
    if marker is not None:
        found.problems.append(f"{relative}:{marker.line}: docs-test marker before no fence")
    return found


def _track_marker(
    line: str, number: int, marker: _Marker | None, relative: Path, found: MarkdownBlocks
) -> _Marker | None:
    """The marker pending for the next fence after ``line`` (blank lines keep it)."""
    if not line.strip():
        return marker
    if marker is not None:
        found.problems.append(f"{relative}:{marker.line}: docs-test marker before no fence")
    match = _MARKER.match(line)
    if match is None:
        if "docs-test:" in line:
            found.problems.append(f"{relative}:{number}: a docs-test marker must be its own line")
        return None
    try:
        skip, env = parse_marker(match["body"])
    except ValueError as exc:
        found.problems.append(f"{relative}:{number}: {exc}")
        return None
    return _Marker(number, skip, env)


def _closing(lines: list[str], start: int, fence: str) -> int:
    """Index of the line that closes the fence opened at ``start`` (or the end of file)."""
    for index in range(start + 1, len(lines)):
        stripped = lines[index].strip()
        if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
            return index
    return len(lines)


def _dedent(line: str, indent: int) -> str:
    """``line`` without up to ``indent`` leading spaces (a fence indented in a list)."""
    cut = len(line) - len(line.lstrip(" "))
    return line[min(cut, indent) :]


def _check_language(block: DocBlock, found: MarkdownBlocks) -> None:
    known = RUNNABLE.keys() | DOCUMENTS.keys() | SHOWN
    if block.lang not in known:
        what = f"language '{block.lang}'" if block.lang else "no language"
        found.problems.append(
            f"{block.id}: fence with {what}: name one of {', '.join(sorted(known))}"
        )
    elif block.env and block.kind not in ("shell", "python"):
        found.problems.append(f"{block.id}: an env marker only applies to a runnable block")


def markdown_files(root: Path) -> list[Path]:
    """README.md and docs/*.md, relative to ``root``: the pages a reader follows."""
    pages = [Path("README.md"), *sorted(p.relative_to(root) for p in (root / "docs").glob("*.md"))]
    return [page for page in pages if (root / page).is_file()]
