"""What `Metrics.observe` counts from a pass report (pure: no Redis, no server)."""

from __future__ import annotations

from services.controller import metrics, recovering


def _line(rendered: str, name: str) -> str:
    return next(line for line in rendered.splitlines() if line.startswith(name + "{"))


def test_a_listing_pass_counts_its_work_and_its_duration() -> None:
    """Fences, decisions, launches, missing attempts and relaunches are counted; the listing
    pass's duration is observed."""
    m = metrics.Metrics()
    report = recovering.PassReport(
        fenced=["a.s.1", "a.s2.1"],
        accepted=["a.s.1"],
        launched=["a.s.2", "a.s3.4"],
        missing=["a.s4.1"],
        relaunched=["a.s5.2"],
        seconds=0.04,
    )
    m.observe("a", report)
    text = m.render().decode()
    assert _line(text, "agentihooks_fences_total").endswith(" 2.0")
    assert _line(text, "agentihooks_decisions_total").endswith(" 1.0")
    assert _line(text, "agentihooks_replacements_launched_total").endswith(" 2.0")
    assert _line(text, "agentihooks_attempts_missing_total").endswith(" 1.0")
    assert _line(text, "agentihooks_replacements_relaunched_total").endswith(" 1.0")
    assert _line(text, "agentihooks_recovery_pass_seconds_count").endswith(" 1.0")
    assert "agentihooks_watch_fences_total{" not in text


def test_a_watch_recovery_counts_as_a_watch_fence_not_a_pass() -> None:
    """A recovery from a watch event counts its fences twice over (all fences, and fences made
    from the watch) and is not a listing pass: no duration observed."""
    m = metrics.Metrics()
    m.observe("a", recovering.PassReport(watched=True, fenced=["a.s.1"], seconds=0.003))
    text = m.render().decode()
    assert _line(text, "agentihooks_fences_total").endswith(" 1.0")
    assert _line(text, "agentihooks_watch_fences_total").endswith(" 1.0")
    assert "agentihooks_recovery_pass_seconds_count{" not in text


def test_a_standby_or_a_lost_lease_counts_nothing() -> None:
    m = metrics.Metrics()
    m.observe("a", recovering.PassReport(standby=True, fenced=["x"]))
    m.observe("a", recovering.PassReport(lease_lost=True, fenced=["x"]))
    assert "agentihooks_fences_total{" not in m.render().decode()


def test_queued_work_no_pass_waited_for_counts_its_work_but_is_not_a_pass() -> None:
    """Work the seat queue did that no pass or watch brought (a retry after a failed step)
    counts what it did; it is neither a listing pass (no duration) nor a watch fence."""
    m = metrics.Metrics()
    m.observe("a", recovering.PassReport(queued=True, fenced=["a.s.1"], launched=["a.s.2"]))
    text = m.render().decode()
    assert _line(text, "agentihooks_fences_total").endswith(" 1.0")
    assert _line(text, "agentihooks_replacements_launched_total").endswith(" 1.0")
    assert "agentihooks_recovery_pass_seconds_count{" not in text
    assert "agentihooks_watch_fences_total{" not in text
