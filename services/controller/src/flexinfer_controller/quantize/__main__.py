"""``python -m flexinfer_controller.quantize``: the quantize Job's program.

Settings come from ``QUANTIZE_FORMAT``, ``QUANTIZE_INPUT``, ``QUANTIZE_OUTPUT`` and one
``QUANTIZE_<KEY>`` per format option; the flags say the same and win. Exit codes: 0 done
(or already done), 1 the conversion failed, 2 a usage error or a refused request.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from flexinfer_controller.quantize.errors import EXIT_REFUSED, QuantizeError, UnsupportedError
from flexinfer_controller.quantize.request import FORMATS, build_request, options_from_environ
from flexinfer_controller.quantize.run import run

PROG = "python -m flexinfer_controller.quantize"


def parser() -> argparse.ArgumentParser:
    """The command's flags."""
    out = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[1])
    out.add_argument("--format", help=f"one of {', '.join(FORMATS)} (QUANTIZE_FORMAT)")
    out.add_argument("--input", metavar="DIR", help="the safetensors checkpoint (QUANTIZE_INPUT)")
    out.add_argument("--output", metavar="DIR", help="where the result goes (QUANTIZE_OUTPUT)")
    out.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a format option, as QUANTIZE_<KEY>: FP8 strategy=channel|tensor, "
        "ignore=module,...; GGUF type=F32|F16|Q8_0 (repeatable)",
    )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run one quantization; print one line on failure."""
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s", stream=sys.stderr)
    environ = os.environ
    options = options_from_environ(environ)
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"{PROG}: --option {item!r} is not KEY=VALUE", file=sys.stderr)
            return EXIT_REFUSED
        options[key.strip().lower()] = value
    try:
        request = build_request(
            args.format or environ.get("QUANTIZE_FORMAT"),
            args.input or environ.get("QUANTIZE_INPUT"),
            args.output or environ.get("QUANTIZE_OUTPUT"),
            options,
        )
    except QuantizeError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    try:
        run(request)
    except UnsupportedError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except QuantizeError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
