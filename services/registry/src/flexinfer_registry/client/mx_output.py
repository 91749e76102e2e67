"""Output for ``flexinfer mx``: human or JSON on stdout, errors on stderr, progress on a TTY."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)


@dataclass
class Output:
    """Where and how a command reports: ``human`` lines or one ``json`` document."""

    mode: str = "human"
    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)

    def result(self, data: dict[str, Any], human: str) -> None:
        """The command's answer: ``data`` as JSON, or the ``human`` text."""
        if self.mode == "human":
            print(human, file=self.stdout)
        else:
            indent = 2 if self.mode == "json-pretty" else None
            print(json.dumps(data, indent=indent, sort_keys=True), file=self.stdout)

    def error(self, message: str, data: dict[str, Any] | None = None) -> None:
        """One readable error line on stderr (and a JSON error document on stdout in JSON mode)."""
        print(f"error: {message}", file=self.stderr)
        if self.mode != "human":
            print(json.dumps({"ok": False, "error": message, **(data or {})}), file=self.stdout)

    @contextmanager
    def progress(self, label: str) -> Iterator[ProgressSink]:
        """A rich progress bar on stderr when it is a terminal; silent otherwise."""
        if not self.stderr.isatty():
            yield ProgressSink(None, None)
            return
        progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"),
            console=Console(file=self.stderr),
            transient=True,
        )
        with progress:
            task = progress.add_task(label, total=None, status="")
            yield ProgressSink(progress, task)


class ProgressSink:
    """Feeds a progress bar; a no-op when there is none (not a TTY)."""

    def __init__(self, progress: Progress | None, task: Any) -> None:
        self._progress = progress
        self._task = task

    def bytes(self, done: int, total: int | None) -> None:
        """Bytes downloaded so far (direct downloads)."""
        if self._progress is not None:
            self._progress.update(self._task, completed=done, total=total)

    def finished(self) -> None:
        """The download is complete: a bar whose total is known is drawn full."""
        if self._progress is not None:
            task = self._progress.tasks[self._task]
            if task.total is not None:  # the final line says the rest
                self._progress.update(self._task, completed=task.total, status="")

    def status(self, text: str) -> None:
        """A status line from the server (server downloads report no byte counts)."""
        if self._progress is not None:
            self._progress.update(self._task, status=text[:60])


_BYTES = re.compile(r"^downloading: (\d+)(?: of (\d+))? bytes")
"""The registry's progress message (``core.download_status.Progress.describe``): the
ModelExpress status stream carries no byte counts of its own, only this text."""


def byte_counts(message: str) -> tuple[int, int | None] | None:
    """(bytes done, total or None) from a server's DOWNLOADING message; None if it has none."""
    match = _BYTES.match(message)
    if match is None:
        return None
    total = match.group(2)
    return int(match.group(1)), int(total) if total is not None else None
