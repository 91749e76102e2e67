"""The free-space check: refused with the sizes named, through statvfs or a fixed source."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flexinfer_common.errors import PermanentError
from flexinfer_controller.flashload import FlashLoadSettings, InsufficientSpaceError, flash_load
from flexinfer_controller.flashload.plan import make_plan
from flexinfer_controller.flashload.space import StatvfsSpace, check_fits, human
from flexinfer_controller.flashload.testing import FixedSpace, make_model

MIB = 1 << 20


@pytest.fixture
def source(tmp_path: Path) -> Path:
    (tmp_path / "dest").mkdir()
    return make_model(tmp_path / "src", [2 * MIB, MIB])


def test_a_model_that_does_not_fit_is_refused_naming_the_sizes(
    source: Path, tmp_path: Path
) -> None:
    needed = make_plan(source, tmp_path / "dest", "default/m").needed_bytes
    space = FixedSpace(needed + 10 * MIB - 1)  # a byte short of the model plus the margin
    settings = FlashLoadSettings(margin_mb=10)
    with pytest.raises(InsufficientSpaceError) as caught:
        flash_load(source, tmp_path / "dest", "default/m", settings, space=space)
    error = caught.value
    assert isinstance(error, PermanentError)
    assert (error.needed, error.free, error.margin) == (needed, needed + 10 * MIB - 1, 10 * MIB)
    assert f"needs 3.0 MiB ({needed} bytes) plus a 10.0 MiB margin" in str(error)
    assert f"has {human(error.free)} ({error.free} bytes) free" in str(error)
    assert space.asked == [(tmp_path / "dest").resolve()]
    assert list((tmp_path / "dest").iterdir()) == [tmp_path / "dest" / ".flashload-default_m.lock"]


def test_a_model_that_fits_exactly_is_copied(source: Path, tmp_path: Path) -> None:
    needed = make_plan(source, tmp_path / "dest", "default/m").needed_bytes
    settings = FlashLoadSettings(margin_mb=10)
    result = flash_load(
        source, tmp_path / "dest", "default/m", settings, space=FixedSpace(needed + 10 * MIB)
    )
    assert result.copied_bytes == 3 * MIB + sum(f.stat().st_size for f in source.rglob("*.json"))


def test_statvfs_reports_the_filesystem_free_space(tmp_path: Path) -> None:
    found = os.statvfs(tmp_path)
    free = StatvfsSpace().free_bytes(tmp_path)
    assert 0 <= free <= found.f_blocks * found.f_frsize


def test_the_real_statvfs_refuses_a_margin_beyond_the_filesystem(
    source: Path, tmp_path: Path
) -> None:
    found = os.statvfs(tmp_path)
    size_mb = found.f_blocks * found.f_frsize // MIB  # free space never exceeds the size
    with pytest.raises(InsufficientSpaceError, match="margin"):
        flash_load(source, tmp_path / "dest", "default/m", FlashLoadSettings(margin_mb=size_mb))
    if StatvfsSpace().free_bytes(tmp_path) < 64 * MIB:
        pytest.skip("tmp_path's filesystem has less than 64 MiB free")
    assert not flash_load(
        source, tmp_path / "dest", "default/m", FlashLoadSettings(margin_mb=1)
    ).reused


@pytest.mark.parametrize(
    ("size", "shown"),
    [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (3 * MIB, "3.0 MiB"), (5 << 40, "5.0 TiB")],
)
def test_human_sizes(size: int, shown: str) -> None:
    assert human(size) == shown


def test_check_fits_passes_when_there_is_room(tmp_path: Path) -> None:
    check_fits(tmp_path, 100, 0, FixedSpace(100), "x")
    with pytest.raises(InsufficientSpaceError):
        check_fits(tmp_path, 100, 1, FixedSpace(100), "x")
