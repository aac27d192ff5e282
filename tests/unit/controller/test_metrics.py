"""What `Metrics.observe` counts from a pass report (pure: no Redis, no server)."""

from __future__ import annotations

import pytest
from prometheus_client import parser

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


def test_the_per_swarm_families_are_valid_exposition_text() -> None:
    """The families labelled by swarm are written out by the controller itself (thousands of
    swarms in milliseconds): Prometheus's own parser reads them back, values, buckets and all,
    beside the process-wide gauges."""
    m = metrics.Metrics()
    m.observe("a", recovering.PassReport(fenced=["a.s.1"], seconds=0.04))
    m.observe("a", recovering.PassReport(seconds=0.3))
    m.observe("b", recovering.PassReport(watched=True, fenced=["b.s.1"]))
    m._outcomes.by_swarm["a"] = {"native": 2, "fresh": 1}
    m._outcomes.paused["a"] = True
    m._outcomes.lost["a"] = False
    families = {f.name: f for f in parser.text_string_to_metric_families(m.render().decode())}
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in families.values()
        for s in f.samples
    }
    assert families["agentihooks_fences"].type == "counter"
    assert samples[("agentihooks_fences_total", (("swarm", "a"),))] == 1.0
    assert samples[("agentihooks_watch_fences_total", (("swarm", "b"),))] == 1.0
    assert (
        samples[("agentihooks_restore_outcomes_total", (("swarm", "a"), ("type", "native")))] == 2
    )
    assert samples[("agentihooks_recovery_paused", (("swarm", "a"),))] == 1.0
    assert samples[("agentihooks_state_lost", (("swarm", "a"),))] == 0.0
    bucket = "agentihooks_recovery_pass_seconds_bucket"
    assert samples[(bucket, (("le", "0.05"), ("swarm", "a")))] == 1.0
    assert samples[(bucket, (("le", "0.25"), ("swarm", "a")))] == 1.0
    assert samples[(bucket, (("le", "0.5"), ("swarm", "a")))] == 2.0
    assert samples[(bucket, (("le", "+Inf"), ("swarm", "a")))] == 2.0
    assert samples[("agentihooks_recovery_pass_seconds_count", (("swarm", "a"),))] == 2.0
    assert samples[("agentihooks_recovery_pass_seconds_sum", (("swarm", "a"),))] == pytest.approx(
        0.34
    )
    assert samples[("agentihooks_leases_held", ())] == 0.0
    assert families["agentihooks_recovery_pass_seconds"].type == "histogram"


def test_a_label_value_is_quoted_as_the_format_says() -> None:
    assert metrics._label('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    assert metrics._label("plain-swarm") == "plain-swarm"
