"""`observations.Seen` carrying a replacement a decision call admitted (issue 22: after a
decision call the seat's worker launches the replacement from what the accept script returned,
with nothing read again), and what else seen of the seat sends it back to a read."""

from __future__ import annotations

import dataclasses

from services.controller import observations
from services.controller.pods import classifying
from services.controller.pods import runtime as pods
from services.controller.state import records
from tests.unit.controller.test_witnesses import fence, replacement


def admitted(generation: int = 2) -> observations.Admitted:
    execution = dataclasses.replace(
        replacement(), execution_id=records.ExecutionId(f"example.eng-2.{generation}")
    )
    execution = dataclasses.replace(execution, generation=generation)
    fenced = fence(generation - 1, session=None)
    seat = records.Seat(
        seat=records.SeatName("eng-2"),
        task_id="t-eng-2",
        current_execution_id=execution.execution_id,
        generation=generation,
        state=records.SeatState.REPLACING,
        fenced_execution_id=fenced.execution_id,
    )
    return observations.Admitted(fenced, execution, seat, None)


def failure(generation: int) -> pods.Attempt:
    return pods.Attempt(
        swarm="example",
        seat="eng-2",
        execution_id=f"example.eng-2.{generation}",
        generation=generation,
        failure=classifying.FailureReason.OOM_KILLED,
        alive=False,
    )


def test_an_admission_alone_is_launched_with_nothing_read() -> None:
    seen = observations.Seen(admitted=admitted())
    assert seen.launches_admitted and not seen.needs_read


def test_anything_else_seen_of_the_seat_sends_it_the_usual_way() -> None:
    """A failure or a missing attempt seen meanwhile: the seat is worked as usual (fenced
    first for the watch's failure, read otherwise), the admission only a hint."""
    watched = observations.Seen(admitted=admitted())
    watched.merge(observations.Seen(failed=failure(2), watched=True))
    assert not watched.launches_admitted and not watched.needs_read  # fenced first
    listed = observations.Seen(admitted=admitted())
    listed.merge(observations.Seen(failed=failure(2)))
    assert not listed.launches_admitted and listed.needs_read
    missing = observations.Seen(admitted=admitted())
    missing.merge(observations.Seen(missing={"example.eng-2.2": 1}))
    assert not missing.launches_admitted and missing.needs_read


def test_the_newest_admission_is_kept_and_a_new_one_is_news() -> None:
    seen = observations.Seen(admitted=admitted(3))
    seen.merge(observations.Seen(admitted=admitted(2)))
    assert seen.admitted is not None and seen.admitted.replacement.generation == 3
    newest = admitted(4)
    seen.merge(observations.Seen(admitted=newest))
    assert seen.admitted is newest
    assert seen.covers(observations.Seen(admitted=admitted(4)))
    assert not seen.covers(observations.Seen(admitted=admitted(5)))
    assert not observations.Seen().covers(observations.Seen(admitted=admitted()))


def test_a_retry_reads_the_seat_again() -> None:
    """After a failed step the admission may be stale: the retry reads what is recorded."""
    retry = observations.Seen(admitted=admitted()).retry()
    assert retry.admitted is None and retry.needs_read
