"""The embedded stack's admin token: when the admin API must be guarded, and where its token is.

``flexinfer up`` keeps the admin API open only where nothing else is guarded and nothing
leaves the machine: loopback and no proxy auth. Otherwise the controller, scheduler and
registry take the operator's own token (``FLEXINFER_CONTROLLER_AUTH_TOKEN[_FILE]``) or one generated
once into ``DATA_DIR/admin-token`` (mode 0600), which later runs reuse, so scripts keep
working across restarts.
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from flexinfer_common.auth import AdminAuthSettings, is_loopback, read_token_file
from flexinfer_common.errors import ConfigError

TOKEN_FILE = "admin-token"


@dataclass(frozen=True)
class AdminToken:
    """The admin token the embedded services share."""

    value: str
    """The token itself, for the demo's own admin call; never printed."""
    file: Path | None
    """Where an operator finds it (None: it came from FLEXINFER_CONTROLLER_AUTH_TOKEN)."""
    generated: bool
    """Whether ``flexinfer up`` made it (rather than the operator)."""


def embedded_admin_token(
    data_dir: Path, settings: AdminAuthSettings, *, host: str, proxy_auth: bool
) -> AdminToken | None:
    """The admin token to guard the embedded admin API with; None leaves it open."""
    if settings.auth_token is not None:
        return AdminToken(settings.auth_token.get_secret_value(), settings.auth_token_file, False)
    if settings.auth_token_file is not None:
        first = read_token_file(settings.auth_token_file)[0]
        return AdminToken(first, settings.auth_token_file, False)
    if settings.allow_unauthenticated or (is_loopback(host) and not proxy_auth):
        return None
    path = data_dir / TOKEN_FILE
    generated = _create(path)
    _check_private(path)
    return AdminToken(read_token_file(path)[0], path, generated)


def _create(path: Path) -> bool:
    """Write a fresh token to ``path`` unless one is there; whether it wrote one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write("fxa_" + secrets.token_urlsafe(32) + "\n")
    return True


def _check_private(path: Path) -> None:
    """Refuse a token file that is a link, not a file, or readable by anyone else."""
    info = path.lstat()
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{path} must be a regular file holding the admin token")
    if info.st_mode & 0o077:
        mode = stat.S_IMODE(info.st_mode)
        raise ConfigError(f"{path} is readable by other users (mode {mode:04o}): chmod 600 it")
