"""``flexinfer mx model download`` against a real registry, with a generated model."""

from __future__ import annotations

import asyncio
import fcntl
import io
import os
import pty
import re
import select
import struct
import termios
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import pytest
from rich.filesize import pick_unit_and_suffix

from flexinfer_common.serving import serve_in_background
from flexinfer_engine.core.weights import generate_model
from flexinfer_registry.app import create_app
from flexinfer_registry.client.mx_cli import run
from flexinfer_registry.client.mx_output import Output
from flexinfer_registry.settings import RegistrySettings
from flexinfer_registry.testing.fakes import OneProvider, ScriptedProvider

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    return generate_model(tmp_path / "models" / "tiny", name="tiny", preset="tiny")


@pytest.fixture
def model_files(model_dir: Path) -> dict[str, bytes]:
    """The generated model's files, by name."""
    return {p.name: p.read_bytes() for p in sorted(model_dir.iterdir()) if p.is_file()}


class Terminal:
    """A real pseudo-terminal: the CLI draws its progress bar on it, the test reads it."""

    def __init__(self, columns: int = 160) -> None:
        self._master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
        self.stream = open(slave, "w", encoding="utf-8", buffering=1)  # noqa: SIM115
        self._seen = bytearray()
        self._drawn = threading.Condition()  # notified each time the reader takes bytes
        self._done = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while not self._done.is_set():
            ready, _, _ = select.select([self._master], [], [], 0.05)
            if ready:
                try:
                    data = os.read(self._master, 65536)
                except OSError:
                    return
                with self._drawn:
                    self._seen += data
                    self._drawn.notify_all()

    @property
    def text(self) -> str:
        """Everything drawn so far, without the escape sequences."""
        with self._drawn:
            return ANSI.sub("", bytes(self._seen).decode(errors="replace"))

    def wait_for(self, needle: str, timeout_s: float = 30.0) -> None:
        """Block until ``needle`` has been drawn; AssertionError after ``timeout_s``."""
        with self._drawn:
            if not self._drawn.wait_for(lambda: needle in self.text, timeout_s):
                raise AssertionError(f"no {needle!r} drawn within {timeout_s}s")

    def close(self) -> None:
        """Stop reading and close both ends."""
        self._done.set()
        self._reader.join(5)
        self.stream.close()
        os.close(self._master)


@contextmanager
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[Terminal]:
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("COLUMNS", raising=False)
    term = Terminal()
    try:
        yield term
    finally:
        term.close()


@asynccontextmanager
async def registry(tmp_path: Path, **wiring: object) -> AsyncIterator[str]:
    """A registry serving gRPC in this process (heartbeats every 50 ms); its address."""
    settings = RegistrySettings(
        port=0,
        grpc_port=0,
        cache_dir=tmp_path / "cache",
        file_roots=[tmp_path / "models"],
        download_heartbeat_s=0.05,
    )
    app = create_app(settings, **wiring)  # type: ignore[arg-type]
    async with serve_in_background(app):
        yield str(app.state.grpc_address)


def _cli(argv: list[str], stderr: io.TextIOBase | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(argv, Output(stdout=out, stderr=stderr or err))  # type: ignore[arg-type]
    return code, out.getvalue(), err.getvalue()


async def test_the_progress_bar_shows_the_total_the_registry_knows(
    tmp_path: Path, model_files: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    files = model_files
    total = sum(len(data) for data in files.values())
    unit, suffix = pick_unit_and_suffix(total, ["bytes", "kB", "MB", "GB"], 1000)
    shown_total = f"/{total / unit:.1f} {suffix}" if unit > 1 else f"/{total} {suffix}"
    # The source holds the download half-way until the test has seen the bar.
    gate = asyncio.Event()
    source = ScriptedProvider(files, gate=gate)
    async with registry(tmp_path, providers=OneProvider(source)) as address:
        with terminal(monkeypatch) as term:
            argv = ["--server", address, "model", "download", "org/tiny", "--strategy",
                    "ServerOnly"]  # fmt: skip
            cli = asyncio.create_task(asyncio.to_thread(_cli, argv, term.stream))
            try:
                await asyncio.to_thread(term.wait_for, shown_total)
            finally:
                gate.set()
            code, out, _ = await cli
            assert code == 0, term.text
            # The CLI can return before the reader thread has taken its last frame off the pty,
            # so wait for the full bar to arrive instead of reading the text at once.
            full = shown_total.lstrip("/").split()[0] + shown_total
            await asyncio.to_thread(term.wait_for, full)
            drawn = term.text
    assert out.startswith("org/tiny: DOWNLOADED")
    # Before the registry's first progress report the total is unknown; from then on every
    # frame shows it, the last one full.
    after = drawn[drawn.index(shown_total) :]
    assert "/? " not in after, "a frame lost the total"
    assert full in after, repr(after)


async def test_listing_a_model_not_cached_says_which_command_downloads_it(
    tmp_path: Path, model_dir: Path
) -> None:
    source = model_dir.as_uri()
    async with registry(tmp_path) as address:
        code, _, err = await asyncio.to_thread(
            _cli, ["--server", address, "model", "list-files", source]
        )
        assert code == 1
        assert err == (
            f"error: {source} is not in the registry's cache; run "
            f"'flexinfer mx --server {address} model download {source}' first\n"
        )
        code, _, err = await asyncio.to_thread(_cli, ["--server", address, "model", "validate",
                                                      source, "--provider", "s3"])  # fmt: skip
        assert code == 1
        assert f"model download {source} --provider s3' first" in err
        assert "EnsureModelDownloaded" not in err

        code, out, err = await asyncio.to_thread(
            _cli, ["--server", address, "model", "download", source, "--strategy", "ServerOnly"]
        )
        assert code == 0, err
        code, out, err = await asyncio.to_thread(
            _cli, ["--server", address, "model", "list-files", source]
        )
        assert code == 0, err
        assert "model.safetensors" in out
