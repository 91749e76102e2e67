"""Local registry Secrets (catalog.secrets): a Secret volume's layout, and names refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from flexinfer_common.errors import ConfigError, NotFoundError
from flexinfer_controller.catalog.secrets import DirectorySecrets, check_secret_name


async def test_keys_are_the_files_of_the_secrets_directory(tmp_path: Path) -> None:
    # A Secret volume: keys are symlinks into a ..data directory, which is not a key.
    data = tmp_path / "ml" / "pull" / "..2025_01_01"
    data.mkdir(parents=True)
    (data / ".dockerconfigjson").write_bytes(b"{}")
    (tmp_path / "ml" / "pull" / "..data").symlink_to(data.name)
    (tmp_path / "ml" / "pull" / ".dockerconfigjson").symlink_to("..data/.dockerconfigjson")
    found = await DirectorySecrets(tmp_path).read("ml", "pull")
    assert found == {".dockerconfigjson": b"{}"}


async def test_absent_secrets_and_an_unset_directory_are_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="secret ml/nope not found"):
        await DirectorySecrets(tmp_path).read("ml", "nope")
    with pytest.raises(NotFoundError, match="FLEXINFER_CATALOG_SECRETS_DIR"):
        await DirectorySecrets(None).read("ml", "pull")


@pytest.mark.parametrize("name", ["../etc", "a/b", "UPPER", "", "x" * 254, "a\nb", "."])
async def test_names_that_are_not_secret_names_never_reach_the_filesystem(
    tmp_path: Path, name: str
) -> None:
    with pytest.raises(ConfigError, match="not a valid Secret name"):
        check_secret_name(name)
    with pytest.raises(ConfigError):
        await DirectorySecrets(tmp_path).read("ml", name)
