"""The parallel copy: ranges of every file by a pool of workers, into a temp directory
that is fsync'ed and renamed into place, so a crash never leaves a half copy at the name.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from flexinfer_controller.flashload import locks, manifest
from flexinfer_controller.flashload.cleanup import remove_copy, temp_path
from flexinfer_controller.flashload.copiers import RangeCopier, UnsupportedError, make_copier
from flexinfer_controller.flashload.errors import FlashLoadError
from flexinfer_controller.flashload.plan import CopyPlan, PlannedFile, make_plan, safe_name
from flexinfer_controller.flashload.settings import FlashLoadSettings
from flexinfer_controller.flashload.space import FreeSpace, StatvfsSpace, check_fits


@dataclass(frozen=True)
class LoadResult:
    """One flash load: where to launch from, and what it cost."""

    path: Path
    copied_bytes: int
    total_bytes: int
    seconds: float
    reused: bool
    method: str

    @property
    def gb_per_s(self) -> float:
        """Copied bytes per second, in decimal GB (0 for a reused copy)."""
        return self.copied_bytes / self.seconds / 1e9 if self.seconds > 0 else 0.0


def flash_load(
    source: Path,
    dest_root: Path,
    key: str,
    settings: FlashLoadSettings,
    *,
    space: FreeSpace | None = None,
    copier: RangeCopier | None = None,
) -> LoadResult:
    """Copy model ``key`` from ``source`` to ``dest_root/<safe key>``, or reuse a current copy."""
    started = time.perf_counter()
    plan = make_plan(source, dest_root, key, settings.exclude)
    with locks.held(locks.lock_path(plan.dest_root, safe_name(key))):
        if manifest.is_current(plan, settings.reuse_check):
            seconds = time.perf_counter() - started
            return LoadResult(plan.launch_path, 0, plan.total_bytes, seconds, True, "reused")
        _remove_stale(plan)
        check_fits(
            plan.dest_root,
            plan.needed_bytes,
            settings.margin_bytes,
            space or StatvfsSpace(),
            f"model {key} ({len(plan.files)} files)",
        )
        chosen = copier or make_copier(settings.method, settings.buffer_bytes)
        copy_plan(plan, settings, chosen)
    seconds = time.perf_counter() - started
    return LoadResult(
        plan.launch_path,
        plan.total_bytes,
        plan.total_bytes,
        seconds,
        False,
        getattr(chosen, "chosen", chosen.name),
    )


def copy_plan(plan: CopyPlan, settings: FlashLoadSettings, copier: RangeCopier) -> None:
    """Copy every file of ``plan`` into a temp directory, then rename it to ``plan.final``."""
    temp = temp_path(plan.dest_root, safe_name(plan.key))
    try:
        _create_tree(temp, plan)
        hashes: dict[str, str] = {}
        with ThreadPoolExecutor(settings.concurrency, thread_name_prefix="flashload") as pool:
            _run_all(
                pool,
                [
                    partial(_copy_range, plan, temp, copier, *task)
                    for task in ranges(plan, settings.chunk_bytes)
                ],
            )
            finish = partial(_finish_file, temp, settings, hashes)
            _run_all(pool, [partial(finish, found) for found in plan.files])
        _publish(temp, plan, manifest.build(plan, settings.reuse_check, hashes))
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise


def _remove_stale(plan: CopyPlan) -> None:
    """Delete an outdated copy first: its space is needed, and nothing may launch from it."""
    if not os.path.lexists(plan.final):
        return
    if plan.final.is_symlink() or manifest.read(plan.final) is None:
        raise FlashLoadError(f"{plan.final} exists and is not a flash copy; not replacing it")
    remove_copy(plan.final)


def _publish(temp: Path, plan: CopyPlan, written: manifest.Manifest) -> None:
    """Write the manifest, fsync the tree, rename it to its final name, fsync the parent."""
    try:
        manifest.write(temp, written)
        _fsync_tree(temp, plan)
        os.rename(temp, plan.final)
        _fsync_dir(plan.dest_root)
    except OSError as exc:
        raise FlashLoadError(f"cannot publish the copy {plan.final}: {exc}") from exc


def ranges(plan: CopyPlan, chunk: int) -> list[tuple[PlannedFile, int, int]]:
    """``(file, offset, length)`` of every range, the largest files first."""
    tasks: list[tuple[PlannedFile, int, int]] = []
    for found in sorted(plan.files, key=lambda f: -f.size):
        tasks.extend(
            (found, offset, min(chunk, found.size - offset))
            for offset in range(0, found.size, chunk)
        )
    return tasks


def _create_tree(temp: Path, plan: CopyPlan) -> None:
    """The temp directory with every subdirectory and every file at its final size."""
    try:
        temp.mkdir(mode=0o755)
        for relative in plan.dirs:
            (temp / relative).mkdir(mode=0o755)
        for found in plan.files:
            fd = os.open(temp / found.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.ftruncate(fd, found.size)
            finally:
                os.close(fd)
    except OSError as exc:
        raise FlashLoadError(f"cannot create the copy in {plan.dest_root}: {exc}") from exc


def _run_all(pool: ThreadPoolExecutor, tasks: list[Callable[[], None]]) -> None:
    """Run ``tasks`` on ``pool``; on the first failure skip the rest and raise it."""
    failed = threading.Event()

    def guarded(task: Callable[[], None]) -> None:
        if failed.is_set():
            return  # the copy is lost already: copying more only delays the error
        try:
            task()
        except BaseException:
            failed.set()
            raise

    futures: list[Future[None]] = [pool.submit(guarded, task) for task in tasks]
    _done, pending = wait(futures, return_when=FIRST_EXCEPTION)
    for future in pending:
        future.cancel()
    wait(pending)  # the ones already running finish before the temp copy is removed
    for future in futures:
        if future.done() and not future.cancelled() and future.exception() is not None:
            future.result()


def _copy_range(
    plan: CopyPlan, temp: Path, copier: RangeCopier, found: PlannedFile, offset: int, length: int
) -> None:
    try:
        src = os.open(plan.source_path(found.path), os.O_RDONLY | os.O_CLOEXEC)
        try:
            dst = os.open(temp / found.path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                copier.copy(src, dst, offset, length)
            except UnsupportedError as exc:
                raise FlashLoadError(
                    f"the {copier.name} copy method cannot copy {found.path} to "
                    f"{plan.dest_root} ({exc}); method auto falls back to one that can"
                ) from exc
            finally:
                os.close(dst)
        finally:
            os.close(src)
    except OSError as exc:
        raise FlashLoadError(f"cannot copy {found.path}: {exc.strerror or exc}") from exc


def _finish_file(
    temp: Path, settings: FlashLoadSettings, hashes: dict[str, str], found: PlannedFile
) -> None:
    """fsync a copied file, give it the source's mode, and check or hash it if asked."""
    path = temp / found.path
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
            os.fchmod(fd, found.mode | 0o400)  # the engine must be able to read it
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        if settings.verify_integrity and size != found.size:
            raise FlashLoadError(f"{found.path}: copied {size} bytes, expected {found.size}")
        if settings.reuse_check == "sha256":
            hashes[found.path] = manifest.sha256_of(path)  # one key per thread: no lock needed
    except OSError as exc:
        raise FlashLoadError(f"cannot finish {found.path}: {exc.strerror or exc}") from exc


def _fsync_tree(temp: Path, plan: CopyPlan) -> None:
    """fsync every directory, deepest first, so the rename publishes durable entries."""
    for relative in sorted(plan.dirs, key=lambda d: -d.count("/")):
        _fsync_dir(temp / relative)
    _fsync_dir(temp)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
