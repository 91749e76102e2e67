"""The resource commands' one error type, carrying its documented exit code."""

from __future__ import annotations

EXIT_OK = 0
EXIT_API = 1
"""The server (admin API or apiserver) answered an error: 401, 404, 409, 422, 5xx."""
EXIT_USAGE = 2
"""Bad usage or input (arguments, an unreadable file, a bad document), or no server to reach."""


class CliError(Exception):
    """A failure to report as one line on stderr, exiting with ``code``."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(" ".join(message.split()))
        self.code = code


def usage_error(message: str) -> CliError:
    """Bad input, or nothing to connect to (exit 2)."""
    return CliError(message, EXIT_USAGE)


def api_error(status: int, message: str) -> CliError:
    """What the server refused, with its HTTP status (exit 1)."""
    return CliError(f"{status} {message}", EXIT_API)


def is_not_found(exc: CliError) -> bool:
    """Whether ``exc`` is the server's 404."""
    return exc.code == EXIT_API and str(exc).startswith("404 ")


def is_conflict(exc: CliError) -> bool:
    """Whether ``exc`` is the server's 409."""
    return exc.code == EXIT_API and str(exc).startswith("409 ")
