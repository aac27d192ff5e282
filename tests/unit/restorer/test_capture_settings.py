"""The sidecar's capture settings: `AGENTIHOOKS_CAPTURE_…`, read once at start.

Issue 21: continuous capture "archives complete new records within about a second
(configurable)"; a bad value is refused at start with a message naming the variable
(DESIGN, "Configuration and ports").
"""

from __future__ import annotations

import pytest

from services.restorer import following, start_settings


def test_the_defaults_follow_at_a_second() -> None:
    """With nothing set the sidecar follows: a second's lag, source scans at most every 5 s."""
    assert start_settings.capture_cadence({}) == following.Cadence()
    assert following.Cadence().lag_s == 1.0 and following.Cadence().source_period_s == 5.0


def test_each_setting_is_read() -> None:
    cadence = start_settings.capture_cadence(
        {
            "AGENTIHOOKS_CAPTURE_LAG_S": "0.5",
            "AGENTIHOOKS_CAPTURE_SOURCE_PERIOD_S": "30",
            "AGENTIHOOKS_CAPTURE_WATCH_MAX_DIRS": "500",
            "AGENTIHOOKS_CAPTURE_FORCE_POLLING": "true",
        }
    )
    assert cadence == following.Cadence(
        lag_s=0.5, source_period_s=30.0, max_watched_dirs=500, force_polling=True
    )


def test_a_lag_of_zero_captures_on_the_interval_only() -> None:
    assert start_settings.capture_cadence({"AGENTIHOOKS_CAPTURE_LAG_S": "0"}) is None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("AGENTIHOOKS_CAPTURE_LAG_S", "soon"),
        ("AGENTIHOOKS_CAPTURE_LAG_S", "-1"),
        ("AGENTIHOOKS_CAPTURE_SOURCE_PERIOD_S", "inf"),
        ("AGENTIHOOKS_CAPTURE_WATCH_MAX_DIRS", "nan"),
        ("AGENTIHOOKS_CAPTURE_FORCE_POLLING", "sometimes"),
    ],
)
def test_a_malformed_value_stops_the_sidecar_naming_it(
    name: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        start_settings.capture_cadence({name: value})
    assert stopped.value.code == 2
    assert name in capsys.readouterr().err
