"""The scheduler service skeleton: health, metrics, settings and its command line."""

from __future__ import annotations

import pytest

from flexinfer_scheduler.__main__ import main
from flexinfer_scheduler.app import create_app
from flexinfer_scheduler.settings import SchedulerSettings
from flexinfer_testing import skeleton


async def test_health_and_metrics_over_asgi() -> None:
    app = create_app(SchedulerSettings(port=0))
    await skeleton.check_health_and_metrics(app, unknown_path="/bind")


async def test_serves_on_a_real_socket() -> None:
    settings = SchedulerSettings(host="127.0.0.1", port=0)
    await skeleton.check_serves_on_a_real_socket(create_app(settings), settings)


def test_settings_defaults_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    skeleton.check_settings_env(
        SchedulerSettings,
        env_prefix="FLEXINFER_SCHEDULER_",
        default_port=8888,
        monkeypatch=monkeypatch,
    )


def test_main_rejects_a_bad_port(capsys: pytest.CaptureFixture[str]) -> None:
    skeleton.check_main_rejects_a_bad_port(main, capsys)


def test_main_reports_a_busy_port(capsys: pytest.CaptureFixture[str]) -> None:
    skeleton.check_main_reports_a_busy_port(main, capsys)


def test_main_refuses_an_open_api_beyond_loopback() -> None:
    skeleton.check_main_refuses_an_open_api(
        "flexinfer_scheduler", env_prefix="FLEXINFER_SCHEDULER_"
    )
