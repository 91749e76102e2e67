"""``python -m flexinfer_controller.flashload``: copy a model to tmpfs, or clean copies up.

The same program as ``flexinfer flash-load``; the init container and the cleanup Job run it
from the controller's image, which has no ``flexinfer`` command.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flexinfer_common.service import exit_code
from flexinfer_controller.flashload.cleanup import cleanup
from flexinfer_controller.flashload.copiers import COPIERS
from flexinfer_controller.flashload.copy import flash_load
from flexinfer_controller.flashload.errors import InsufficientSpaceError, UnsafeSourceError
from flexinfer_controller.flashload.settings import FlashLoadSettings

PROG = "python -m flexinfer_controller.flashload"

COPY_HELP = """Copy a model directory to tmpfs with parallel reads, after checking that it
fits in the free space; a current copy is reused. Prints one line: bytes, seconds, GB/s.
Stale copies: see '{prog} cleanup --help'."""

COPY_EXIT_CODES = """exit codes:
  0  copied, or a current copy reused
  1  the copy failed (an I/O error, or the source changed during the copy)
  2  usage or settings error (bad option or name, destination not a directory)
  3  the model does not fit in the destination's free space plus the margin
  4  the source holds what is never copied: a symlink leaving it, a FIFO, a device

Settings not given as options come from FLEXINFER_FLASH_LOADER_* variables."""

CLEANUP_HELP = """Remove the flash copies in DEST of models not named with --keep, and the temp
copies a crashed load left. Nothing else in DEST is touched; a name a loader holds now
is left alone."""

CLEANUP_EXIT_CODES = """exit codes:
  0  done
  1  a copy could not be removed, or DEST cannot be listed
  2  usage error (bad option or name)"""


def copy_parser(prog: str) -> argparse.ArgumentParser:
    """The copy command's parser (flags that are not given leave the settings' value)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=COPY_HELP.format(prog=prog),
        epilog=COPY_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--source",
        type=Path,
        required=True,
        metavar="DIR",
        help="the model directory (or one model file) to copy",
    )
    parser.add_argument(
        "--dest",
        type=Path,
        required=True,
        metavar="DIR",
        help="the tmpfs to copy into, /dev/shm usually",
    )
    parser.add_argument(
        "--name", required=True, help="the Model's namespace/name: the copy is DEST/namespace_name"
    )
    parser.add_argument(
        "--workers", type=int, dest="concurrency", metavar="N", help="parallel copy workers"
    )
    parser.add_argument(
        "--chunk-mb",
        type=int,
        dest="chunk_size_mb",
        metavar="MIB",
        help="MiB per range a large file is split into",
    )
    parser.add_argument(
        "--margin-mb",
        type=int,
        dest="margin_mb",
        metavar="MIB",
        help="MiB that must stay free on DEST after the copy",
    )
    parser.add_argument(
        "--method",
        choices=["auto", *COPIERS],
        help="copy syscall (auto: the first the kernel accepts)",
    )
    parser.add_argument(
        "--reuse-check",
        choices=["mtime", "sha256"],
        dest="reuse_check",
        help="how an existing copy is judged current",
    )
    parser.add_argument(
        "--verify-integrity",
        action="store_const",
        const=True,
        dest="verify_integrity",
        help="check every file's size after the copy",
    )
    parser.add_argument(
        "--exclude", action="append", metavar="GLOB", help="relative paths not copied (repeatable)"
    )
    return parser


def cleanup_parser(prog: str) -> argparse.ArgumentParser:
    """The cleanup command's parser."""
    parser = argparse.ArgumentParser(
        prog=f"{prog} cleanup",
        description=CLEANUP_HELP,
        epilog=CLEANUP_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--dest", type=Path, required=True, metavar="DIR", help="the tmpfs holding the copies"
    )
    parser.add_argument(
        "--keep",
        action="extend",
        nargs="+",
        default=[],
        metavar="NAME",
        help="namespace/name of a Model whose copy stays (repeatable)",
    )
    return parser


def _coded(prog: str, run: Callable[[], int]) -> int:
    """``exit_code`` plus the flash loader's own codes for no space (3) and unsafe source (4)."""

    def guarded() -> int:
        try:
            return run()
        except InsufficientSpaceError as exc:
            print(f"{prog}: {exc}", file=sys.stderr)
            return 3
        except UnsafeSourceError as exc:
            print(f"{prog}: {exc}", file=sys.stderr)
            return 4

    return exit_code(prog, guarded)


def _copy(argv: list[str], prog: str) -> int:
    args = copy_parser(prog).parse_args(argv)
    overrides: dict[str, Any] = {
        key: value
        for key, value in vars(args).items()
        if value is not None and key not in ("source", "dest", "name")
    }

    def run() -> int:
        settings = FlashLoadSettings(**overrides)
        result = flash_load(args.source, args.dest, args.name, settings)
        verb = "reused" if result.reused else f"copied with {result.method}"
        print(
            f"{verb} {args.name}: {result.copied_bytes} bytes in {result.seconds:.3f} s, "
            f"{result.gb_per_s:.2f} GB/s -> {result.path}"
        )
        return 0

    return _coded(prog, run)


def _cleanup(argv: list[str], prog: str) -> int:
    args = cleanup_parser(prog).parse_args(argv)

    def run() -> int:
        report = cleanup(args.dest, args.keep)
        print(
            f"removed {len(report.removed)}, kept {len(report.kept)}, "
            f"busy {len(report.busy)}" + "".join(f"\n  removed {n}" for n in report.removed)
        )
        return 0

    return _coded(f"{prog} cleanup", run)


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """``[cleanup] ARGS...``: copy a model to tmpfs, or remove stale copies; the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["cleanup"]:
        return _cleanup(args[1:], prog)
    return _copy(args, prog)


if __name__ == "__main__":
    sys.exit(main())
