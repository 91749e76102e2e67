"""Process plumbing for the local runtime: spawn, readiness pipe, exit watching, killing.

Engines are spawned with ``posix_spawn`` rather than ``subprocess.Popen`` so that no Popen
object owns them: a controller that exits without stopping its engines (so a restarted one
can adopt them) would otherwise have Popen warn about, or asyncio kill, still-running
children. Exits are watched with a pidfd (no polling), which works for adopted engines
that are not our children too; children are reaped with ``waitpid`` so none is left a zombie.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

from flexinfer_common.errors import PermanentError

READY_FD = 3
"""The descriptor number the engine sees its ready pipe as."""

_MAX_READY_LINE = 65536


def _above_ready_fd(fd: int) -> int:
    # dup2(fd, fd) would keep close-on-exec set, and low numbers would be clobbered by
    # the child's own dup2s: move every source descriptor above them first.
    if fd > READY_FD:
        return fd
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, READY_FD + 1)
    os.close(fd)
    return moved


def spawn(argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> tuple[int, int]:
    """Start ``argv`` in its own session, output to ``log_path``; returns (pid, ready read fd)."""
    read_fd, write_fd = os.pipe()
    write_fd = _above_ready_fd(write_fd)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    null_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    log_fd, null_fd = _above_ready_fd(log_fd), _above_ready_fd(null_fd)
    actions = [
        (os.POSIX_SPAWN_DUP2, null_fd, 0),
        (os.POSIX_SPAWN_DUP2, log_fd, 1),
        (os.POSIX_SPAWN_DUP2, log_fd, 2),
        (os.POSIX_SPAWN_DUP2, write_fd, READY_FD),
    ]
    try:
        pid = os.posix_spawn(
            argv[0],
            list(argv),
            dict(env),
            file_actions=actions,
            setsid=True,  # own session and process group: a terminal's Ctrl-C spares it
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),  # as Popen's restore_signals
        )
    except OSError as exc:
        os.close(read_fd)
        raise PermanentError(f"cannot start {argv[0]}: {exc.strerror or exc}") from exc
    finally:
        for fd in (write_fd, log_fd, null_fd):
            os.close(fd)
    return pid, read_fd


async def read_ready_line(fd: int) -> bytes:
    """The first line written to ``fd`` (b"" if it closed without one); closes ``fd``."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    done: asyncio.Future[bytes] = loop.create_future()
    buf = bytearray()

    def on_readable() -> None:
        try:
            chunk = os.read(fd, _MAX_READY_LINE)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        buf.extend(chunk)
        if not chunk or b"\n" in buf or len(buf) >= _MAX_READY_LINE:
            loop.remove_reader(fd)
            if not done.done():
                done.set_result(bytes(buf).split(b"\n", 1)[0] if b"\n" in buf else bytes(buf))

    loop.add_reader(fd, on_readable)
    try:
        return await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def free_port(host: str) -> int:
    """A TCP port nothing listens on at ``host`` now, for an engine that must be told one.

    Another process may take it before the engine binds it; the engine then exits and is
    restarted (crash backoff), on a new port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def reap(pid: int) -> int | None:
    """Collect a child's exit code without blocking; None if not our child or still running."""
    try:
        wpid, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    if wpid == 0:
        return None
    return os.waitstatus_to_exitcode(status)


async def wait_exit(pid: int, poll_interval_s: float) -> int | None:
    """Wait until ``pid`` exits; its exit code if it was our child (and is then reaped)."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return reap(pid)
    except OSError:
        return await _poll_exit(pid, poll_interval_s)
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()

    def on_exit() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(pidfd, on_exit)
    try:
        await exited
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
    # A child becomes reapable a moment after the pidfd signals; retry briefly.
    for _ in range(50):
        code = reap(pid)
        if code is not None or not _is_child_zombie_or_alive(pid):
            return code
        await asyncio.sleep(0.01)
    return None


def _is_child_zombie_or_alive(pid: int) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.ppid() == os.getpid()
    except psutil.Error:
        return False


async def _poll_exit(pid: int, poll_interval_s: float) -> int | None:
    # Only for kernels without pidfd_open (< 5.3): nothing else reports a non-child's exit.
    while is_alive(pid):  # noqa: ASYNC110
        await asyncio.sleep(poll_interval_s)
    return reap(pid)


def is_alive(pid: int, create_time: float | None = None) -> bool:
    """True if ``pid`` runs (not a zombie) and, when given, started at ``create_time``."""
    try:
        proc = psutil.Process(pid)
        if create_time is not None and abs(proc.create_time() - create_time) > 0.05:
            return False
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def create_time(pid: int) -> float:
    """The process's start time (to tell it from a later process reusing the pid); 0 if gone."""
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return 0.0


def signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the process group led by ``pid`` (engines lead their own), or ``pid`` alone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


async def terminate(pid: int, grace_s: float, exit_wait: asyncio.Future[int | None]) -> None:
    """SIGTERM the group, wait ``grace_s`` for ``exit_wait``, then SIGKILL it."""
    signal_group(pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(asyncio.shield(exit_wait), grace_s)
    except TimeoutError:
        signal_group(pid, signal.SIGKILL)
        await asyncio.shield(exit_wait)
    # Stragglers the engine forked into its group die with it.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def environ_of(pid: int) -> dict[str, str]:
    """The process's environment, empty if it cannot be read."""
    try:
        return dict(psutil.Process(pid).environ())
    except psutil.Error:
        return {}


def pids_with_env(name: str, value: str) -> list[tuple[int, dict[str, str]]]:
    """Processes of this user whose environment has ``name=value`` (blocking: /proc scan)."""
    found = []
    me = os.getpid()
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            env = proc.environ()
            if env.get(name) == value and proc.status() != psutil.STATUS_ZOMBIE:
                found.append((proc.pid, dict(env)))
        except psutil.Error:
            continue
    return found
