"""A replacement that refused its restore is held, then relaunched (spec: "Refusals": "the
fenced attempt's claim and the accepted decision are left in place for the master or
operator"; "Troubleshooting": "Resume was chosen but the worker did not start. … The decision
stays accepted, so choosing again returns the same decision. Fix the cause … and relaunch.")."""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
import sys
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule, run_state_machine_as_test

from services.common import directives, errors, revocations, tokens
from services.controller import outcomes, recovering, replacing, telemetry
from services.controller.pods import local
from services.controller.state import keys, reading, records
from tests.integration.controller import harness as h
from tests.integration.controller import test_state_machine as machine
from tests.integration.controller.harness import SWARM, first, second
from tests.support.redis_server import RedisServer

C = directives.Continuity
RESUME, FRESH = records.Choice.RESUME, records.Choice.FRESH
NOT_PENDING = "no recovery decision is pending for this attempt"
F1, R = first("eng-1"), second("eng-1")


async def report_native(rec: recovering.Recovery, worker: records.Worker) -> outcomes.Reported:
    """The replacement reports the native restore its directive asked for."""
    return await rec.report_restore(
        worker, recovery=C.NATIVE, checkpoint_id="ckpt-7", session_id="sess-1", watermark=412
    )


async def resumed_replacement(client: aioredis.Redis) -> h.Harness:
    """eng-1 failed after capturing sess-1; it was resumed natively (automatically) from ckpt-7
    and its replacement R runs."""
    hx = await h.start(client)
    await hx.recovery.report_capture(
        await hx.worker(F1), native_session_id="sess-1", archive_watermark=400
    )
    hx.checkpoints.by_execution[F1] = [h.summary("ckpt-7")]
    hx.runtime.fail(F1)
    report = await hx.recovery.reconcile()
    assert report.accepted == [F1] and report.launched == [R]
    return hx


async def refused_and_exited(client: aioredis.Redis) -> h.Harness:
    """As `resumed_replacement`, then R reported `version_changed` and its entry point exited
    non-zero (the runtime lists R as application_exit)."""
    hx = await resumed_replacement(client)
    await hx.recovery.report_refusal(await hx.worker(R), "version_changed")
    hx.runtime.fail(R, "application_exit")
    return hx


@pytest.fixture
async def held(redis_client: aioredis.Redis) -> h.Harness:
    return await refused_and_exited(redis_client)


def relaunch_events(events: list[telemetry.Event]) -> list[telemetry.Event]:
    return [e for e in events if e.kind == "recovery" and e.detail.get("action") == "relaunch"]


async def assert_held(hx: h.Harness, reason: str = "version_changed") -> None:
    """R is the seat's current, unfenced attempt; the first decision stays accepted; nothing
    new was decided or admitted; the task waits; status shows the refusal."""
    c = hx.client
    assert await reading.fence(c, SWARM, R) is None
    held = await reading.execution(c, SWARM, R)
    assert held is not None and held.state is records.ExecutionState.RUNNING
    seat = await reading.seat(c, SWARM, "eng-1")
    assert seat is not None and seat.current_execution_id == R and seat.generation == 2
    assert seat.state is records.SeatState.RESTORE_REFUSED
    assert seat.fenced_execution_id == F1
    d = await reading.decision(c, SWARM, F1)
    assert d is not None and d.state is records.DecisionState.ACCEPTED
    assert d.replacement_execution_id == R
    assert await reading.decision(c, SWARM, R) is None
    assert await reading.execution(c, SWARM, keys.execution_id(SWARM, "eng-1", 3)) is None
    task = await reading.task(c, SWARM, "t-eng-1")
    assert task is not None and task.awaiting == records.RECOVERY_PENDING and task.held
    assert task.recovery is not None and task.recovery["status"] == "accepted"
    [card] = [c for c in (await hx.recovery.status()).handoffs if c.seat == "eng-1"]
    assert (card.refusal, card.continuity, card.decision) == (reason, "pending", "accepted")
    assert card.replacement_execution_id == R
    assert R not in hx.runtime.remove_calls


async def test_a_refused_replacement_that_exits_non_zero_is_held_not_fenced(
    held: h.Harness,
) -> None:
    """Spec (Refusals): a restore that cannot deliver its directive stops the launch; the
    fenced attempt's claim and the accepted decision are left in place for the master or
    operator. The replacement exiting non-zero afterwards is not fenced as application_exit and
    recovered again (no new decision, no generation 3, no automatic resume into the same
    refusal), however many passes run."""
    fences_before = [e for e in await held.recovery.events() if e.kind == "fence"]
    for _ in range(4):
        report = await held.recovery.reconcile()
        assert report.held == [R]
        assert report.fenced == [] and report.accepted == [] and report.pending == []
        assert report.launched == [] and report.missing == [] and report.relaunched == []
    await assert_held(held)
    assert [e for e in await held.recovery.events() if e.kind == "fence"] == fences_before
    assert held.runtime.launch_calls.count(R) == 1
    assert held.checkpoints.calls == 1  # nothing was decided again


async def test_a_slow_refused_worker_is_not_fenced_while_alive(
    redis_client: aioredis.Redis,
) -> None:
    """A replacement still running after reporting its refusal (an entry point slow to exit)
    is left alone while alive, also when the runtime already classifies it failed while it
    may still run (node_lost), and once it exits non-zero."""
    hx = await resumed_replacement(redis_client)
    await hx.recovery.report_refusal(await hx.worker(R), "conversation_mismatch")
    report = await hx.recovery.reconcile()
    assert report.fenced == [] and report.held == []
    await assert_held(hx, "conversation_mismatch")
    hx.runtime.fail(R, "node_lost", alive=True)
    report = await hx.recovery.reconcile()
    assert report.fenced == [] and report.held == [R]
    hx.runtime.fail(R, "application_exit")
    report = await hx.recovery.reconcile()
    assert report.fenced == [] and report.held == [R]
    await assert_held(hx, "conversation_mismatch")


async def test_the_fence_script_itself_refuses_a_refused_replacement(held: h.Harness) -> None:
    """The hold is atomic: the fence script checks for a stored refusal under the lease, so a
    refusal stored between the pass's read and its fence still holds the attempt."""
    status = await held.recovery.writer.fence("eng-1", R, 2, "application_exit")
    assert status == "restore_refused"
    await assert_held(held)


async def test_choosing_again_returns_the_same_decision_and_replacement(held: h.Harness) -> None:
    """Spec (Troubleshooting): the decision stays accepted, so choosing again returns the same
    decision; (Repeated requests) the same checkpoint and the same replacement, admitting
    nothing new, directly or as a recorded request applied by the pass, also after a
    restart. A different choice is refused as not pending and changes nothing."""
    rec = held.recovery
    await rec.reconcile()
    accepted = await reading.decision(held.client, SWARM, F1)
    assert accepted is not None and accepted.directive is not None
    again = await rec.restore_decision("eng-1", RESUME, None, records.Operator())
    assert again.repeated and again.decision == accepted
    assert again.decision.replacement_execution_id == R
    assert again.decision.directive == directives.Directive("ckpt-7", C.NATIVE, "sess-1", 412)
    by_master = await rec.restore_decision(F1, RESUME, "master@example-1", held.master())
    assert by_master.repeated and by_master.decision == accepted
    await rec.request_restore_decision("eng-1", RESUME, None, records.Operator())
    report = await rec.reconcile()
    assert report.requests_applied == 1 and report.accepted == [] and report.launched == []
    await held.restart()
    after_restart = await held.recovery.restore_decision("eng-1", RESUME, None, records.Operator())
    assert after_restart.repeated and after_restart.decision == accepted
    with pytest.raises(errors.Refused, match=NOT_PENDING):
        await held.recovery.restore_decision("eng-1", FRESH, None, records.Operator())
    await held.recovery.reconcile()
    await assert_held(held)
    assert held.runtime.launch_calls.count(R) == 1


async def test_relaunch_after_the_operator_deletes_the_failed_worker(held: h.Harness) -> None:
    """Spec (Troubleshooting): fix the cause and relaunch. Once the operator deleted the failed
    worker (kubectl delete pod) the pass clears the stored refusal and launches the same
    execution again: same directive, execution id, generation and credential. The relaunch is
    a recovery event; the task keeps recovery_pending until the relaunched worker reports its
    verified outcome, which then closes the recovery as usual."""
    rec = held.recovery
    await rec.reconcile()
    spec_before = held.runtime.specs[R]
    held.runtime.delete(R)
    first_pass = await rec.reconcile()
    # One pass without the worker is not enough (a Pod being created looks the same).
    assert first_pass.missing == [R] and first_pass.relaunched == []
    assert await reading.refusal(held.client, SWARM, R) == "version_changed"
    second_pass = await rec.reconcile()
    assert second_pass.relaunched == [R] and second_pass.launched == [R]
    assert second_pass.fenced == [] and second_pass.accepted == []
    assert held.runtime.launch_calls.count(R) == 2
    relaunched = held.runtime.specs[R]
    assert relaunched == spec_before  # same id, generation, image, env and credential
    assert await reading.refusal(held.client, SWARM, R) is None
    execution = await reading.execution(held.client, SWARM, R)
    assert execution is not None and execution.launched and execution.relaunches == 1
    assert execution.directive == directives.Directive("ckpt-7", C.NATIVE, "sess-1", 412)
    seat = await reading.seat(held.client, SWARM, "eng-1")
    assert seat is not None and seat.state is records.SeatState.REPLACING
    assert (seat.current_execution_id, seat.generation) == (R, 2)
    task = await reading.task(held.client, SWARM, "t-eng-1")
    assert task is not None and task.awaiting == records.RECOVERY_PENDING
    [card] = [c for c in (await rec.status()).handoffs if c.seat == "eng-1"]
    assert card.refusal is None and card.continuity == "pending"
    [event] = relaunch_events(await rec.events())
    assert event.execution_id == R and event.controller_epoch == rec.lease.epoch
    assert (event.expected_generation, event.observed_generation) == (2, 2)
    assert event.detail["cleared_refusal"] == "version_changed"
    # The relaunched worker (the same credential) restores and reports.
    outcome = await report_native(rec, await held.worker(R))
    assert outcome.outcome.verified
    task = await reading.task(held.client, SWARM, "t-eng-1")
    assert task is not None and task.awaiting == "worker" and not task.held
    await rec.reconcile()
    assert await reading.attention(held.client, SWARM) == []


async def test_a_relaunch_happens_once_per_disappearance(held: h.Harness) -> None:
    """Relaunch once per disappearance: further passes launch nothing more; only a new refusal
    followed by a new deletion relaunches again."""
    rec = held.recovery
    held.runtime.delete(R)
    await rec.reconcile()
    assert (await rec.reconcile()).relaunched == [R]
    for _ in range(3):
        report = await rec.reconcile()
        assert report.relaunched == [] and report.launched == [] and report.missing == []
    assert held.runtime.launch_calls.count(R) == 2
    # The cause was not fixed after all: it refuses again and exits; it is held again.
    await rec.report_refusal(await held.worker(R), "version_changed")
    held.runtime.fail(R, "application_exit")
    assert (await rec.reconcile()).held == [R]
    await assert_held(held)
    held.runtime.delete(R)
    await rec.reconcile()
    assert (await rec.reconcile()).relaunched == [R]
    execution = await reading.execution(held.client, SWARM, R)
    assert execution is not None and execution.relaunches == 2
    assert len(relaunch_events(await rec.events())) == 2
    assert held.runtime.launch_calls.count(R) == 3


async def test_a_worker_the_runtime_remembers_as_deleted_is_relaunched(held: h.Harness) -> None:
    """A runtime that lists a deleted Pod's remembered final state (a Kubernetes watch saw the
    deletion: `departed`) counts it as gone: the refused replacement is relaunched, not fenced
    with the failure its final state shows."""
    held.runtime.depart(R)
    first_pass = await held.recovery.reconcile()
    assert first_pass.held == [R] and first_pass.missing == [R]
    second_pass = await held.recovery.reconcile()
    assert second_pass.relaunched == [R] and second_pass.fenced == []
    assert held.runtime.attempts[R].alive and not held.runtime.attempts[R].departed


async def test_a_relaunched_attempt_that_fails_without_a_refusal_is_recovered(
    held: h.Harness,
) -> None:
    """Once relaunched the attempt holds no refusal: a failure of it (without a new refusal) is
    fenced and recovered like any other, with a decision for generation 2."""
    held.runtime.delete(R)
    await held.recovery.reconcile()
    await held.recovery.reconcile()
    held.runtime.fail(R, "oom_killed")
    report = await held.recovery.reconcile()
    assert report.fenced == [R]
    fence = await reading.fence(held.client, SWARM, R)
    assert fence is not None and fence.reason == "oom_killed"


async def test_a_verified_outcome_after_a_refusal_ends_the_hold(
    redis_client: aioredis.Redis,
) -> None:
    """A replacement whose restorer restarted and then restored reports a verified outcome:
    the outcome is stored and the refusal no longer holds the attempt, so a later failure is
    fenced. A refusal after a verified outcome is refused (outcome_conflict)."""
    hx = await resumed_replacement(redis_client)
    worker = await hx.worker(R)
    await hx.recovery.report_refusal(worker, "missing_object")
    await report_native(hx.recovery, worker)
    assert await reading.refusal(hx.client, SWARM, R) is None
    seat = await reading.seat(hx.client, SWARM, "eng-1")
    assert seat is not None and seat.state is records.SeatState.RUNNING
    with pytest.raises(errors.Refused) as caught:
        await hx.recovery.report_refusal(worker, "missing_object")
    assert caught.value.reason == "outcome_conflict"
    assert await reading.refusal(hx.client, SWARM, R) is None
    hx.runtime.fail(R, "application_exit")
    assert (await hx.recovery.reconcile()).fenced == [R]


async def test_a_controller_that_lost_its_lease_relaunches_nothing(held: h.Harness) -> None:
    """Spec: every write runs under the controller's lease, so a controller that lost its lease
    changes nothing: a stale controller's pass neither counts the missing worker nor clears the
    refusal nor launches; the holder does."""
    held.runtime.delete(R)
    stale = held.recovery
    holder = await held.restart()
    for _ in range(2):
        report = await stale.reconcile()
        assert report.lease_lost or report.standby
    assert await reading.expected(held.client, SWARM) == {R: 0, first("eng-2"): 0}
    assert await reading.refusal(held.client, SWARM, R) == "version_changed"
    assert held.runtime.launch_calls.count(R) == 1
    await holder.reconcile()
    assert (await holder.reconcile()).relaunched == [R]


async def count_effects(client: aioredis.Redis) -> int:
    await client.flushall()
    hx = await refused_and_exited(client)
    counter = h.CrashAfter(None)
    await hx.restart(counter)
    hx.runtime.after_effect = counter
    hx.runtime.delete(R)
    for _ in range(3):
        await hx.recovery.reconcile()
    return counter.count


@pytest.mark.slow
async def test_a_crash_at_any_effect_of_a_relaunch_relaunches_once(
    redis_client: aioredis.Redis,
) -> None:
    """Crash-safe (DESIGN 3): interrupted after each effect of the relaunch in turn (each Lua
    script and the runtime's launch) and restarted, every run ends with exactly one relaunch
    event, the worker created once more, the refusal cleared and the attempt recorded as
    launched, expected in the list again."""
    total = await count_effects(redis_client)
    assert total >= 4
    for n in range(1, total + 1):
        await redis_client.flushall()
        hx = await refused_and_exited(redis_client)
        crash = h.CrashAfter(n)
        await hx.restart(crash)
        hx.runtime.after_effect = crash
        hx.runtime.delete(R)
        crashes = passes = 0
        while passes < 4:
            try:
                await hx.recovery.reconcile()
                passes += 1
            except h.Crash:
                crashes += 1
                await hx.restart(crash)
        where = f"crash after effect {n} of {total}: {dict(crash.done)}"
        assert crashes == 1, where
        assert crash.done["absent::relaunch"] == 1, where
        assert crash.done["runtime:launch::"] == 1, where
        assert crash.done["launched::launched"] == 1, where
        assert len(relaunch_events(await hx.recovery.events())) == 1, where
        execution = await reading.execution(hx.client, SWARM, R)
        assert execution is not None and execution.launched, where
        assert execution.relaunches == 1, where
        assert await reading.refusal(hx.client, SWARM, R) is None, where
        assert (await reading.expected(hx.client, SWARM)).get(R) == 0, where
        assert await reading.fence(hx.client, SWARM, R) is None, where
        assert R in hx.runtime.attempts and hx.runtime.attempts[R].alive, where


WORKER = """
import os, pathlib, sys, time
here = pathlib.Path(os.environ["MARKS"])
if os.environ["AGENTIHOOKS_GENERATION"] == "1":
    while not (here / "fail-first").exists():
        time.sleep(0.05)
    sys.exit(1)
if not (here / "cause-fixed").exists():
    print("restore refused: version_changed")
    sys.exit(3)
time.sleep(60)
"""


async def test_relaunch_with_local_worker_processes(
    redis_client: aioredis.Redis, tmp_path: pathlib.Path
) -> None:
    """The same hold and relaunch with real worker processes (LocalRuntime): the refused
    replacement exits 3 and is held; the operator fixes the cause and deletes the attempt's
    folder; the pass starts the same execution again, which now runs."""
    marks = tmp_path / "marks"
    marks.mkdir()
    workers = local.LocalRuntime(
        tmp_path / "workers", base_env={"PATH": os.environ["PATH"], "MARKS": str(marks)}
    )
    rec = recovering.Recovery(
        redis_client, SWARM, workers, grant_key=h.GRANT_KEY, worker_image=h.IMAGE
    )
    try:
        assert await rec.lease.acquire()
        doc = h.document(automation=False, seats=("eng-1",))
        doc["command"] = [sys.executable, "-c", WORKER]
        await rec.apply_swarm(doc)
        (marks / "fail-first").touch()
        await eventually(rec, lambda r: r.fenced == [F1])
        await rec.restore_decision("eng-1", FRESH, None, records.Operator())
        replacement = await reading.execution(redis_client, SWARM, R)
        assert replacement is not None and replacement.launched
        token = replacing.worker_token(h.GRANT_KEY, replacement)
        cred = await tokens.check_worker_credential(
            h.GRANT_KEY, token, revocations.RedisRevocations(redis_client)
        )
        await rec.report_refusal(records.Worker(cred), "source: the patch does not apply")
        await eventually(rec, lambda r: r.held == [R])
        for _ in range(3):
            report = await rec.reconcile()
            assert report.held == [R] and report.fenced == [] and report.relaunched == []
        folder = tmp_path / "workers" / SWARM / R
        assert "restore refused" in (folder / "worker.log").read_text()
        (marks / "cause-fixed").touch()
        shutil.rmtree(folder)
        await eventually(rec, lambda r: r.relaunched == [R])
        [attempt] = [a for a in await workers.list_attempts(SWARM) if a.execution_id == R]
        assert attempt.alive and attempt.failure is None
        for _ in range(3):
            report = await rec.reconcile()
            assert report.fenced == [] and report.missing == [] and report.launched == []
        execution = await reading.execution(redis_client, SWARM, R)
        assert execution is not None and execution.relaunches == 1 and execution.launched
    finally:
        for attempt in await workers.list_attempts(SWARM):
            await workers.remove(SWARM, attempt.execution_id)
        await workers.aclose()


async def eventually(
    rec: recovering.Recovery, done: Callable[[recovering.PassReport], bool], timeout: float = 10.0
) -> None:
    """Run passes until one's report satisfies `done`."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not done(await rec.reconcile()):
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail("no pass did it in time")
        await asyncio.sleep(0.05)


class RefusalRecoveries(machine.Recoveries):
    """The state machine of test_state_machine, plus replacements that refuse their restore
    and workers deleted from outside the runtime (with and without a remembered final state)
    or finishing."""

    @rule(
        seat=st.sampled_from(machine.SEATS),
        reason=st.sampled_from(["version_changed", "corrupt_object", "source: conflict"]),
    )
    def refusal_report(self, seat: str, reason: str) -> None:
        current = self.run(self._seat(seat)).current_execution_id
        if current in self.runtime.specs:
            worker = self._call(self._worker(current))
            if worker is not None:
                self._call(self.recovery.report_refusal(worker, reason))

    @rule(seat=st.sampled_from(machine.SEATS), how=st.sampled_from(["delete", "depart", "finish"]))
    def worker_goes(self, seat: str, how: str) -> None:
        current = self.run(self._seat(seat)).current_execution_id
        if current in self.runtime.attempts:
            getattr(self.runtime, how)(current)

    @rule(seat=st.sampled_from(machine.SEATS), choice=st.sampled_from(list(records.Choice)))
    def refused_then_relaunched(self, seat: str, choice: records.Choice) -> None:
        """A failure, a choice, a refusal and a non-zero exit, the operator's deletion, passes
        and an honest report in a row (each still racing whatever the other rules left)."""
        self.pod_fails(seat, "oom_killed")
        self.reconcile()
        self.decide(seat, choice, 1)
        self.refusal_report(seat, "version_changed")
        self.pod_fails(seat, "application_exit")
        self.reconcile()
        self.worker_goes(seat, "delete")
        self.reconcile()
        self.reconcile()
        self.outcome_report(seat, honest=True, previous=False)

    @invariant()
    def refusals_hold(self) -> None:
        self.run(self._check_refusals())

    async def _check_refusals(self) -> None:
        c, s = self.client, h.SWARM
        for key in await c.keys(keys.refusal(s, "*")):
            eid = key.decode().rpartition(":refusal:")[2]
            held = await reading.execution(c, s, eid)
            # A replacement holding a refusal is never fenced, replaced or decided on.
            assert held is not None and held.state is records.ExecutionState.RUNNING, eid
            assert held.is_replacement, eid
            seat = await self._seat(held.seat)
            assert seat.current_execution_id == eid, eid
            assert await reading.fence(c, s, eid) is None, eid
            assert await reading.decision(c, s, eid) is None, eid
            # A refusal and a verified outcome never stand together.
            assert await reading.outcome(c, s, eid) is None, eid
        for eid in await reading.expected(c, s):
            # Only a seat's launched, current, unfenced attempt is expected in the runtime's
            # list.
            held = await reading.execution(c, s, eid)
            assert held is not None and held.launched, eid
            assert held.state is records.ExecutionState.RUNNING, eid
            assert (await self._seat(held.seat)).current_execution_id == eid, eid


@pytest.mark.slow
def test_refusal_and_deletion_state_machine(redis_server: RedisServer) -> None:
    """Random interleavings of failures, refusals, deletions from outside (forgotten or
    remembered), finished workers, decisions, outcomes, crashes and lease hand-overs: besides
    every invariant of the recovery state machine, a replacement holding a refusal is never
    fenced, replaced or decided on, and never holds a verified outcome too."""
    RefusalRecoveries.url = redis_server.url
    run_state_machine_as_test(
        RefusalRecoveries,
        settings=settings(
            max_examples=40,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
