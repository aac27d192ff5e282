"""An event's JSON form (its log line and API answer) names every field of the event."""

from __future__ import annotations

import dataclasses

from services.controller import telemetry


def test_an_events_json_has_every_field_with_its_detail_copied() -> None:
    detail = {"reason": "oom_killed", "lost_tail": {"length": "unknown"}}
    event = telemetry.Event("1-0", "fence", "s", "eng-1", "s.eng-1.1", 1, 1, 3, detail, "2026")
    out = event.to_json()
    assert out == {**dataclasses.asdict(event), "detail": detail}
    assert list(out) == [f.name for f in dataclasses.fields(telemetry.Event)]
    out["detail"]["reason"] = "changed"
    assert event.detail["reason"] == "oom_killed"
