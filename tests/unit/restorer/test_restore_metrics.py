"""Restorer.metrics: "On the worker, Restorer.metrics counts outcomes and refusals under
restore_outcomes_by_type, with refusals as refused/<reason>."""

from __future__ import annotations

from services.common import directives
from services.restorer import metrics


def test_outcomes_and_refusals_are_counted_by_type() -> None:
    """Outcomes as native / reconstructed / fresh; refusals as refused/<reason>; a reason with
    a cause (`source: …`) is counted under its code, so no cause text becomes a key."""
    counts = metrics.Metrics()
    assert counts.restore_outcomes_by_type() == {"native": 0, "reconstructed": 0, "fresh": 0}
    counts.outcome(directives.Continuity.NATIVE)
    counts.outcome(directives.Continuity.NATIVE)
    counts.outcome(directives.Continuity.FRESH)
    counts.refused("conversation_mismatch")
    counts.refused("source: patch does not apply")
    counts.refused("source: clone failed")
    counts.refused("no checkpoint store is configured for this worker")
    assert counts.restore_outcomes_by_type() == {
        "native": 2,
        "reconstructed": 0,
        "fresh": 1,
        "refused/conversation_mismatch": 1,
        "refused/source": 2,
        "refused/no checkpoint store is configured for this worker": 1,
    }
    assert metrics.NAME == "restore_outcomes_by_type"
