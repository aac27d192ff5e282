"""A current attempt missing from the runtime's list (spec: "The controller's recovery pass
lists the swarm's worker Pods every pass and classifies each current attempt. A failure reason
is one of oom_killed, evicted, …"). A launched, current, unfenced attempt with no refusal that
the list does not show for two consecutive passes had its Pod removed from under it (a node
drain; a Pod the cluster deleted that a restarted Kubernetes runtime no longer remembers): it
is fenced with reason `evicted` and recovered like any other failure."""

from __future__ import annotations

import dataclasses

import pytest
import redis.asyncio as aioredis

from services.controller import recovering
from services.controller.pods import classifying
from services.controller.pods import runtime as pods
from services.controller.state import keys, reading, records
from tests.integration.controller import harness as h
from tests.integration.controller.harness import SWARM, first, second

E2 = first("eng-2")


async def test_missing_for_two_passes_is_fenced_evicted(hx: h.Harness) -> None:
    """A settled seat (off the pass's attention set) whose Pod vanished: the first pass only
    counts it, the second fences it `evicted`; the fence holds the task and the seat waits
    for a decision (no checkpoint), like any other failure."""
    assert await reading.attention(hx.client, SWARM) == []
    hx.runtime.delete(E2)
    first_pass = await hx.recovery.reconcile()
    assert first_pass.missing == [E2] and first_pass.fenced == []
    assert await reading.fence(hx.client, SWARM, E2) is None
    assert (await reading.expected(hx.client, SWARM))[E2] == 1
    second_pass = await hx.recovery.reconcile()
    assert second_pass.fenced == [E2] and second_pass.pending == [E2]
    fence = await reading.fence(hx.client, SWARM, E2)
    assert fence is not None and fence.reason == "evicted"
    [event] = [e for e in await hx.recovery.events() if e.kind == "fence"]
    assert event.detail["reason"] == "evicted" and event.execution_id == E2
    task = await reading.task(hx.client, SWARM, "t-eng-2")
    assert task is not None and task.awaiting == records.RECOVERY_PENDING
    seat = await reading.seat(hx.client, SWARM, "eng-2")
    assert seat is not None and seat.state is records.SeatState.AWAITING_DECISION
    assert E2 not in await reading.expected(hx.client, SWARM)
    # The other seat was listed all along and is untouched.
    assert await reading.fence(hx.client, SWARM, first("eng-1")) is None
    # Later passes do not fence or count it again.
    third = await hx.recovery.reconcile()
    assert third.fenced == [] and third.missing == []


async def test_the_passes_must_be_consecutive(hx: h.Harness) -> None:
    """One pass without the Pod is not enough (a Pod being created, a list that raced a
    change), and an attempt listed again starts counting from zero."""
    kept = hx.runtime.attempts[E2]
    hx.runtime.delete(E2)
    assert (await hx.recovery.reconcile()).missing == [E2]
    hx.runtime.attempts[E2] = kept
    report = await hx.recovery.reconcile()
    assert report.missing == [] and report.fenced == []
    assert (await reading.expected(hx.client, SWARM))[E2] == 0
    hx.runtime.delete(E2)
    assert (await hx.recovery.reconcile()).fenced == []
    assert (await hx.recovery.reconcile()).fenced == [E2]


async def test_a_pod_forgotten_across_a_controller_restart_is_fenced(hx: h.Harness) -> None:
    """After a controller restart the Kubernetes runtime no longer remembers Pods the cluster
    deleted: the count is kept in Redis, so passes of the old and the new controller add up."""
    hx.runtime.delete(E2)
    await hx.recovery.reconcile()
    await hx.restart()
    report = await hx.recovery.reconcile()
    assert report.fenced == [E2]
    fence = await reading.fence(hx.client, SWARM, E2)
    assert fence is not None and fence.reason == "evicted"
    assert fence.controller_epoch == hx.recovery.lease.epoch


async def test_a_remembered_deletion_keeps_its_own_reason(hx: h.Harness) -> None:
    """A Pod deleted under a running watch is listed with the final state the runtime keeps
    (`departed`); it is fenced at once with the reason that state shows, not as missing."""
    hx.runtime.fail(E2, "oom_killed")
    hx.runtime.depart(E2)
    report = await hx.recovery.reconcile()
    assert report.fenced == [E2] and report.missing == []
    fence = await reading.fence(hx.client, SWARM, E2)
    assert fence is not None and fence.reason == "oom_killed"


async def test_a_finished_attempt_whose_pod_is_cleaned_up_is_not_fenced(hx: h.Harness) -> None:
    """A worker that exited 0 did not fail; once the pass saw it finished it is expected no
    longer, so deleting its Pod afterwards fences nothing."""
    hx.runtime.finish(E2)
    await hx.recovery.reconcile()
    assert E2 not in await reading.expected(hx.client, SWARM)
    hx.runtime.delete(E2)
    for _ in range(3):
        report = await hx.recovery.reconcile()
        assert report.fenced == [] and report.missing == []
    assert await reading.fence(hx.client, SWARM, E2) is None


async def test_an_admitted_attempt_not_yet_launched_is_launched_not_fenced(
    redis_client: aioredis.Redis,
) -> None:
    """An attempt recorded as admitted but not launched yet is not missing: the runtime never
    had it. Each pass tries to launch it, and the first that can, does."""
    runtime = h.FakeRuntime()
    runtime.fail_launch = True
    rec = h.new_recovery(redis_client, runtime, None)
    assert await rec.lease.acquire()
    await rec.apply_swarm(h.document())
    for _ in range(3):
        report = await rec.reconcile()
        assert report.fenced == [] and report.missing == [] and report.launched == []
    assert await reading.expected(redis_client, SWARM) == {}
    runtime.fail_launch = False
    report = await rec.reconcile()
    assert sorted(report.launched) == [first("eng-1"), E2]
    assert await reading.expected(redis_client, SWARM) == {first("eng-1"): 0, E2: 0}
    assert (await rec.reconcile()).missing == []


async def test_a_replacement_missing_before_its_outcome_is_fenced_evicted(
    hx: h.Harness,
) -> None:
    """A replacement (generation 2, no outcome yet, no refusal) whose Pod vanished is recovered
    too: fenced evicted, and its own decision waits for the master or operator."""
    hx.runtime.fail(first("eng-1"))
    await hx.recovery.reconcile()
    await hx.recovery.restore_decision("eng-1", records.Choice.FRESH, None, records.Operator())
    r2 = second("eng-1")
    assert r2 in hx.runtime.attempts and r2 in await reading.expected(hx.client, SWARM)
    hx.runtime.delete(r2)
    await hx.recovery.reconcile()
    report = await hx.recovery.reconcile()
    assert report.fenced == [r2] and report.pending == [r2]
    fence = await reading.fence(hx.client, SWARM, r2)
    assert fence is not None and (fence.reason, fence.generation) == ("evicted", 2)
    d = await reading.decision(hx.client, SWARM, r2)
    assert d is not None and d.state is records.DecisionState.RECOVERY_PENDING


async def test_a_launch_while_the_pass_lists_is_not_counted(hx: h.Harness) -> None:
    """What should be listed is read before the list: a replacement launched while the pass
    lists (a decision posted at that moment) is absent from that list without being missing."""
    hx.runtime.fail(first("eng-1"))
    await hx.recovery.reconcile()
    plain = hx.runtime.list_attempts

    async def listing_then_a_decision(swarm: str) -> list[pods.Attempt]:
        listed = await plain(swarm)
        hx.runtime.list_attempts = plain  # type: ignore[method-assign]
        await hx.recovery.restore_decision("eng-1", records.Choice.FRESH, None, records.Operator())
        return listed

    hx.runtime.list_attempts = listing_then_a_decision  # type: ignore[method-assign]
    report = await hx.recovery.reconcile()
    r2 = second("eng-1")
    assert r2 in hx.runtime.attempts and report.missing == []
    assert (await reading.expected(hx.client, SWARM))[r2] == 0
    assert (await hx.recovery.reconcile()).missing == []


async def test_a_superseded_failed_pod_does_not_hide_the_current_failure(hx: h.Harness) -> None:
    """A seat's fenced attempt still listed as failed (a Pod kept Terminating by a finalizer,
    seen again after a restart) must not hide a failure of its current attempt."""
    e1 = first("eng-1")
    kept = hx.runtime.attempts[e1]
    hx.runtime.fail(e1)
    await hx.recovery.reconcile()
    await hx.recovery.restore_decision("eng-1", records.Choice.FRESH, None, records.Operator())
    old = dataclasses.replace(kept, failure=classifying.FailureReason.OOM_KILLED, alive=False)
    # The old Pod first, as a list in name order would have it.
    hx.runtime.attempts = {e1: old, **hx.runtime.attempts}
    hx.runtime.fail(second("eng-1"), "node_lost")
    report = await hx.recovery.reconcile()
    assert report.fenced == [second("eng-1")]


async def test_a_controller_that_lost_its_lease_counts_nothing(hx: h.Harness) -> None:
    """Spec: a controller that lost its lease changes nothing, missing attempts included."""
    stale = hx.recovery
    hx.runtime.delete(E2)
    holder = await hx.restart()
    for _ in range(3):
        report = await stale.reconcile()
        assert (report.lease_lost or report.standby) and report.fenced == []
    assert (await reading.expected(hx.client, SWARM))[E2] == 0
    await holder.reconcile()
    assert (await holder.reconcile()).fenced == [E2]


@pytest.mark.parametrize("execution", ["example.eng-2.1", "not-ours", "example.eng-2.x"])
def test_seat_of_an_execution_id(execution: str) -> None:
    """The pass finds a missing attempt's seat from its deterministic execution id."""
    expected = "eng-2" if execution == "example.eng-2.1" else None
    assert keys.seat_of(execution) == expected


def test_the_threshold_is_two_passes() -> None:
    """The issue's choice: N = 2, so a Pod being created is not mistaken."""
    assert recovering.MISSING_PASSES == 2
