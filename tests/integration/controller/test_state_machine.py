"""A property-based state machine over the real Redis state layer (issue 3): random
interleavings of Pod failures, captures, checkpoints, decisions, requests, outcome reports,
zombie reports, pause flips, controller crashes (also mid-pass) and lease hand-overs."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from services.common import directives, errors, tokens
from services.controller.state import keys, reading, records
from tests.integration.controller import harness as h
from tests.support.redis_server import RedisServer

T = TypeVar("T")
SEATS = ("eng-1", "eng-2")
REASONS = ("oom_killed", "evicted", "node_lost", "image_pull", "application_exit")
C = directives.Continuity


class Tally:
    """Counts every effect across all controller processes; optionally crashes once."""

    def __init__(self) -> None:
        self.releases: collections.Counter[tuple[str, str]] = collections.Counter()
        self.crash_at: int | None = None
        self.count = 0

    def __call__(self, name: str, reply: Mapping[str, Any]) -> None:
        self.count += 1
        if (name, reply.get("status")) in (("release", "released"), ("fence", "fenced")):
            # One script may record several kinds ("launch_grant,store_grants,account_slot"),
            # and a fence records the authority releases it did the same way.
            for kind in filter(None, str(reply.get("kind", "")).split(",")):
                self.releases[(str(reply["execution"]), kind)] += 1
        if self.crash_at is not None and self.count >= self.crash_at:
            self.crash_at = None
            raise h.Crash(name)


class Recoveries(RuleBasedStateMachine):
    url = ""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.client = aioredis.Redis.from_url(self.url)
        self.tally = Tally()
        self.runtime = h.FakeRuntime()
        self.runtime.after_effect = self.tally
        self.checkpoints = h.FakeCheckpoints()
        self.run(self.client.flushall())
        self.recovery = self._controller()
        self.run(self.recovery.apply_swarm(h.document()))

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def _controller(self) -> Any:
        rec = h.new_recovery(self.client, self.runtime, self.checkpoints, hook=self.tally)
        self.run(self.client.delete(keys.lease(h.SWARM)))
        assert self.run(rec.lease.acquire())
        return rec

    def teardown(self) -> None:
        self.run(self.client.aclose())
        self.loop.close()

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run a core call; refusals are fine, a crash means a controller restart."""
        try:
            return self.run(coro)
        except errors.Refusal:
            return None
        except h.Crash:
            self.recovery = self._controller()
            return None

    async def _seat(self, name: str) -> records.Seat:
        seat = await reading.seat(self.client, h.SWARM, name)
        assert seat is not None
        return seat

    # Rules.

    @rule(seat=st.sampled_from(SEATS), reason=st.sampled_from(REASONS))
    def pod_fails(self, seat: str, reason: str) -> None:
        current = self.run(self._seat(seat)).current_execution_id
        if current in self.runtime.attempts:
            self.runtime.fail(current, reason, alive=reason == "node_lost")

    @rule(
        seat=st.sampled_from(SEATS),
        session=st.sampled_from(["s-1", "s-2"]),
        watermark=st.integers(0, 500),
    )
    def capture(self, seat: str, session: str, watermark: int) -> None:
        current = self.run(self._seat(seat)).current_execution_id
        if current in self.runtime.specs:
            worker = self._call(self._worker(current))
            if worker is not None:
                self._call(
                    self.recovery.report_capture(
                        worker, native_session_id=session, archive_watermark=watermark
                    )
                )

    async def _worker(self, execution: str) -> records.Worker:
        spec = self.runtime.specs[execution]
        cred = await tokens.check_worker_credential(h.GRANT_KEY, spec.worker_credential, _Never())
        return records.Worker(cred)

    @rule(
        seat=st.sampled_from(SEATS), native=st.booleans(), session=st.sampled_from(["s-1", "s-2"])
    )
    def checkpoint_appears(self, seat: str, native: bool, session: str) -> None:
        current = self.run(self._seat(seat)).current_execution_id
        found = self.checkpoints.by_execution.setdefault(current, [])
        found.append(
            h.summary(
                f"ckpt-{len(found) + 1}",
                native=native,
                session=session,
                sequence=len(found) + 1,
                watermark=10 * (len(found) + 1),
            )
        )

    @rule()
    def reconcile(self) -> None:
        self._call(self.recovery.reconcile())

    @rule(seat=st.sampled_from(SEATS), reason=st.sampled_from(REASONS), beside=st.booleans())
    def watch_sees_failure(self, seat: str, reason: str, beside: bool) -> None:
        """The watch's fast path recovers the failed seat without a list, alone or while a
        listing pass runs beside it."""
        current = self.run(self._seat(seat)).current_execution_id
        if current not in self.runtime.attempts:
            return
        self.runtime.fail(current, reason, alive=reason == "node_lost")
        failed = [self.runtime.attempts[current]]

        async def both() -> None:
            await asyncio.gather(self.recovery.recover_failed(failed), self.recovery.reconcile())

        self._call(both() if beside else self.recovery.recover_failed(failed))

    @rule(at=st.integers(1, 8))
    def crash_mid_pass(self, at: int) -> None:
        self.tally.crash_at = self.tally.count + at
        self._call(self.recovery.reconcile())
        self.tally.crash_at = None

    @rule()
    def restart(self) -> None:
        self.recovery = self._controller()

    @rule()
    def lease_handover(self) -> None:
        stale = self.recovery
        self.recovery = self._controller()
        report = self.run(stale.reconcile())
        assert (
            report.lease_lost
            or report.standby
            or not (report.fenced or report.accepted or report.pending)
        )

    @rule(paused=st.booleans())
    def pause_flip(self, paused: bool) -> None:
        self._call(self.recovery.pause() if paused else self.recovery.unpause())

    @rule(
        seat=st.sampled_from(SEATS),
        choice=st.sampled_from(list(records.Choice)),
        times=st.integers(1, 3),
    )
    def decide(self, seat: str, choice: records.Choice, times: int) -> None:
        async def many() -> None:
            await asyncio.gather(
                *(
                    self.recovery.restore_decision(seat, choice, None, records.Operator())
                    for _ in range(times)
                ),
                return_exceptions=True,
            )

        self._call(many())

    @rule(seat=st.sampled_from(SEATS), choice=st.sampled_from(list(records.Choice)))
    def request(self, seat: str, choice: records.Choice) -> None:
        self._call(self.recovery.request_restore_decision(seat, choice, None, records.Operator()))

    @rule(
        seat=st.sampled_from(SEATS),
        reason=st.sampled_from(REASONS),
        choice=st.sampled_from(list(records.Choice)),
        native=st.booleans(),
    )
    def whole_recovery(self, seat: str, reason: str, choice: records.Choice, native: bool) -> None:
        """A capture, a checkpoint, a failure, a pass, a choice and an honest report in a row
        (each still racing whatever state the other rules left)."""
        self.capture(seat, "s-1", 40)
        self.checkpoint_appears(seat, native, "s-1")
        self.pod_fails(seat, reason)
        self.reconcile()
        self.decide(seat, choice, 2)
        self.reconcile()
        self.outcome_report(seat, honest=True, previous=False)

    @rule(seat=st.sampled_from(SEATS), honest=st.booleans(), previous=st.booleans())
    def outcome_report(self, seat: str, honest: bool, previous: bool) -> None:
        at = self.run(self._seat(seat))
        target = at.current_execution_id
        if previous and at.fenced_execution_id:
            target = at.fenced_execution_id  # a zombie or superseded attempt reports
        held = self.run(reading.execution(self.client, h.SWARM, target))
        if held is None or target not in self.runtime.specs:
            return
        d = held.directive
        recovery = d.recovery if honest else C.FRESH if d.recovery is not C.FRESH else C.NATIVE
        worker = self._call(self._worker(target))
        if worker is None:
            return
        self._call(
            self.recovery.report_restore(
                worker,
                recovery=recovery,
                checkpoint_id=d.checkpoint_id if honest else None,
                session_id=d.session_id if honest else None,
                watermark=d.watermark,
            )
        )

    # Invariants.

    @invariant()
    def state_is_consistent(self) -> None:
        self.run(self._check())

    async def _check(self) -> None:
        c, s = self.client, h.SWARM
        executions = [
            records.Execution.from_hash(records.text_hash(await c.hgetall(k)))
            for k in await c.keys(keys.execution(s, "*"))
        ]
        watched = set(await reading.attention(c, s))
        for name in SEATS:
            seat = await self._seat(name)
            # A seat off the pass's attention set has nothing left to do.
            if name not in watched:
                current = await reading.execution(c, s, seat.current_execution_id)
                assert seat.state is records.SeatState.RUNNING and current is not None
                assert current.launched
                if seat.fenced_execution_id:
                    fence = await reading.fence(c, s, seat.fenced_execution_id)
                    assert fence is not None and fence.released(records.ReleaseKind.POD)
            mine = [e for e in executions if e.seat == name]
            running = [e for e in mine if e.state is records.ExecutionState.RUNNING]
            # A seat has at most one current attempt.
            assert len(running) <= 1
            assert all(e.execution_id == seat.current_execution_id for e in running)
            assert seat.generation == max(e.generation for e in mine)
            # A task's awaiting is recovery_pending exactly while a recovery is open.
            task = await reading.task(c, s, seat.task_id)
            assert task is not None
            is_open = False
            if seat.fenced_execution_id is not None:
                d = await reading.decision(c, s, seat.fenced_execution_id)
                done = (
                    d is not None
                    and d.state is records.DecisionState.ACCEPTED
                    and d.replacement_execution_id is not None
                    and await reading.outcome(c, s, d.replacement_execution_id) is not None
                )
                is_open = not done
            assert (task.awaiting == records.RECOVERY_PENDING) == is_open, (name, task, is_open)
            if not is_open:
                assert task.awaiting == "worker"
        fenced = [e for e in executions if e.state is records.ExecutionState.FENCED]
        for e in fenced:
            fence = await reading.fence(c, s, e.execution_id)
            assert fence is not None
            # A fenced attempt has at most one accepted decision and one replacement.
            replacements = [r for r in executions if r.restores_from_execution == e.execution_id]
            assert len(replacements) <= 1
            d = await reading.decision(c, s, e.execution_id)
            if replacements:
                assert d is not None and d.state is records.DecisionState.ACCEPTED
                assert d.replacement_execution_id == replacements[0].execution_id
                assert replacements[0].generation == e.generation + 1
                assert replacements[0].directive == d.directive
        # No release happens twice.
        assert all(n == 1 for n in self.tally.releases.values()), self.tally.releases
        # No outcome is stored that differs from its directive.
        for e in executions:
            o = await reading.outcome(c, s, e.execution_id)
            if o is not None:
                assert (o.recovery, o.checkpoint_id, o.session_id) == (
                    e.directive.recovery,
                    e.directive.checkpoint_id,
                    e.directive.session_id,
                )
                assert o.verified


class _Never:
    async def is_revoked(self, swarm: str, token_id: str) -> bool:
        return False

    async def revoke(self, swarm: str, token_id: str, expires_at: int) -> None:
        return None


@pytest.mark.slow
def test_recovery_state_machine(redis_server: RedisServer) -> None:
    """Issue 3: after every step a seat has at most one current attempt, a fenced attempt at
    most one accepted decision and one replacement, no release happens twice, no outcome is
    stored that differs from its directive, and a task's awaiting is recovery_pending exactly
    while a recovery is open."""
    Recoveries.url = redis_server.url
    run_state_machine_as_test(
        Recoveries,
        settings=settings(
            max_examples=40,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
