"""One seat's reconcile: fence → release → decide → replace → hold, under the swarm's lease.

Level-based: `Reconciler.seat` reads what is recorded of the seat, compares it with what the
runtime showed of it (`Seen`: a failed attempt, an expected attempt missing from a list) and
does only what is missing, each step idempotent and recorded by its own guarded script. It
never relies on having seen every event: a seat worked again with nothing new finds nothing to
do, and a missed event costs latency (the next resync brings the seat), never correctness. The
seat queue (`working`) runs it for one seat at a time, whoever brought the seat: the watch, the
resync, a decision.

Order within a seat: fence, with the authority releases (worker credential and store grants
revoked, account slot ended) recorded in the same script; decide (automatically, or wait for a
choice; a recorded request for the seat is applied here); launch the replacement; remove the
lost attempt's Pod. (A fence from an attempt found missing, and a fence left by a controller
that stopped before this order, get their authority releases in a script of their own.) The Pod
goes last because nothing waits on it: with its authority released the lost worker can do
nothing, so the replacement is not held up by a Pod deletion. Hold: a seat with nothing left to
do is taken off the attention set (`settle`).

Lost decisions are written back. A seat brought with a Pod newer than its records (`Seen.witnessed`:
the Pod carries the decision that admitted it, which Redis lost in a failover) first gets that
decision written back from the Pod (`witnessing`); the seat is then worked as the lost writes
had left it, so its replaced attempt is neither fenced as evicted nor offered again.

Refused restores are held. A replacement that reported a restore refusal is neither fenced nor
replaced, even once its worker exits non-zero: the accepted decision stays in place for the
master or operator (choosing again returns the same decision and replacement), its seat reads
`restore_refused`, its card shows the refusal and the task keeps `recovery_pending`. The operator
fixes the cause and deletes the failed worker (``kubectl delete pod …``); when the attempt is then
missing from the runtime's list for `MISSING_PASSES` consecutive passes, the pass clears the
refusal and launches the same execution again (same directive, execution id and generation),
with a `recovery` event (`action: relaunch`). It relaunches once per disappearance: a relaunched
attempt is held again only by a new refusal.

Offers follow the worker image: a pending decision whose offer was worked out under another
worker image gets it worked out again and recorded, and is not decided again (`offering`, which
also holds how a new fence is decided).

Missing attempts. Every launched, current, unfenced attempt is expected in the runtime's list
(`keys.expected`, read before the list so a launch during the pass is not counted). One that
holds no refusal and is missing for `MISSING_PASSES` consecutive passes (two, so a Pod still
being created is not taken for a lost one) is fenced with reason `evicted`: its Pod was removed
from under it, by a node drain or anyone else, and a restarted Kubernetes runtime no longer
remembers why. An attempt whose worker finished (exited 0) is expected no longer, so cleaning
up its Pod fences nothing. An attempt admitted but not launched yet is launched, as before.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from services.common import logs
from services.controller import (
    admitting,
    deciding,
    decisions,
    launching,
    observations,
    offering,
    releasing,
    replacing,
    witnessing,
)
from services.controller.pods import classifying
from services.controller.pods import runtime as pods
from services.controller.state import (
    housekeeping,
    keys,
    leasing,
    reading,
    records,
    transitions,
    writing,
)

log = logging.getLogger("services.controller.recovery")

MISSING_PASSES = 2
"""Consecutive passes an expected attempt must be missing from the runtime's list before the pass
acts on it (fences it evicted, or relaunches a refused replacement)."""


class Reconciler:
    """The per-seat reconcile of one swarm.

    Args:
        ctx: The steps' context (Redis, the writer under the lease, the runtime, checkpoints).
        lease: The swarm's lease (its epoch is logged with a refused fence).
    """

    def __init__(self, ctx: replacing.Context, lease: leasing.Lease) -> None:
        self.ctx = ctx
        self.lease = lease
        self.swarm = ctx.swarm
        self.client = ctx.client
        self.writer = ctx.writer

    async def seat(
        self,
        name: str,
        seat: records.Seat | None,
        read: bool,
        seen: observations.Seen,
        requests: Sequence[tuple[str, records.Request]],
        report: observations.PassReport,
    ) -> None:
        """Reconcile one seat. `seat` is the seat as read when its work began (`read`), or
        None when it was not read (a failure the watch saw: fenced first, nothing read) or
        does not exist. `requests` are the recorded decision requests for the seat's
        attempts: applied (or refused and dropped) even when the seat is gone."""
        # A Pod newer than the records know of the seat: write its decision back first, then
        # work the seat as the lost writes had left it.
        witnessed = seen.witnessed
        if witnessed is not None and (
            await witnessing.restore(self.ctx, witnessed, seat)
            == transitions.RestoreStatus.RESTORED
        ):
            report.restored.append(witnessed.execution_id)
            seat, read = await reading.seat(self.client, self.swarm, name), True
        decided = None
        if seen.launches_admitted and not read:
            # A decision call admitted the replacement just now: launched from what its
            # accept script returned, nothing read again (the launch script checks it).
            decided = _admitted(seen)
        elif seat is not None or not read:
            decided = await self._fence_and_decide(name, seat, seen, report)
        if requests:
            applied, refused = await decisions.apply_requests(self.ctx, list(requests))
            report.requests_applied += applied
            report.requests_refused += refused
            if applied:
                # A request admitted a replacement: the seat is read again; the fence read
                # before is kept, so its lost Pod is removed once the replacement launched.
                decided = decided and dataclasses.replace(decided, admission=None)
        if decided is None:
            if read and seat is None and not requests:
                return
            current = await reading.seat(self.client, self.swarm, name)
            if current is None:
                return
            decided = _Decided(current, None, None, None)
        await self._replace_and_hold(name, decided, report)

    async def _fence_and_decide(
        self,
        name: str,
        seat: records.Seat | None,
        seen: observations.Seen,
        report: observations.PassReport,
    ) -> _Decided | None:
        """Fence a failed current attempt (or one missing long enough), release the fenced
        attempt's authority, and decide; None when the seat does not exist."""
        failed, missing = seen.failed, seen.missing
        reads: reading.FencedReads | None = None
        if failed is not None and (
            seat is None or seat.current_execution_id == failed.execution_id
        ):
            # The fence (with the authority releases) returns what the next steps read: one
            # round trip. A new fence has no decision yet.
            fenced = await self._fence(name, failed, report, precheck=not seen.watched)
            if fenced.fence is not None:
                reads = reading.FencedReads(
                    fence=fenced.fence,
                    decision=None,
                    config=fenced.config,
                    execution=fenced.execution,
                    paused=fenced.paused,
                )
        if reads is None:
            if failed is not None or seat is None:
                seat = await reading.seat(self.client, self.swarm, name) or seat
                if seat is None:
                    return None
            if seat.current_execution_id in missing:
                evicted = await self._missing(seat, missing[seat.current_execution_id], report)
                if evicted is not None:
                    await self._fence(name, evicted, report, precheck=True)
                seat = await reading.seat(self.client, self.swarm, name) or seat
            if seat.fenced_execution_id is not None:
                reads = await reading.fenced_attempt(
                    self.client, self.swarm, seat.fenced_execution_id
                )
        fence = reads.fence if reads is not None else None
        admission = None
        if reads is not None and fence is not None:
            fence = await releasing.release_authority(self.ctx, fence)
            if reads.decision is None:
                admission = await offering.decide(self.ctx, fence, reads, report)
            elif reads.decision.state is records.DecisionState.RECOVERY_PENDING and not (
                deciding.offer_is_current(reads.decision, self.ctx.worker_image)
            ):
                await offering.reoffer(self.ctx, fence, reads.decision)
        return _Decided(seat, fence, admission, reads.config if reads is not None else None)

    async def _replace_and_hold(
        self, name: str, decided: _Decided, report: observations.PassReport
    ) -> None:
        """Launch the seat's admitted replacement, remove the lost attempt's Pod, and take a
        seat with nothing left to do off the attention set."""
        seat, fence, admission = decided.seat, decided.fence, decided.admission
        current: records.Seat | None
        expect: str
        if admission is not None and admission.seat is not None:
            # Accepted just now: the script returned the replacement and seat it wrote.
            current, attempt = admission.seat, admission.replacement
            expect = admission.seat.current_execution_id
        else:
            # The seat's current attempt, read with the seat: after a decision, its
            # replacement.
            if fence is not None:
                expect = keys.execution_id(self.swarm, fence.seat, fence.generation + 1)
            else:
                assert seat is not None  # read before whenever nothing was fenced
                expect = seat.current_execution_id
            current, attempt = await reading.seat_and_execution(
                self.client, self.swarm, name, expect
            )
        if current is None:
            return
        if current.current_execution_id != expect:
            attempt = await reading.execution(self.client, self.swarm, current.current_execution_id)
        if attempt is not None:
            # The replacement first, then the lost attempt's Pod (one write records both).
            launched, fence = await launching.launch_replacing(
                self.ctx, attempt, fence, seat=current, config=decided.config
            )
            if launched:
                report.launched.append(attempt.execution_id)
                attempt = dataclasses.replace(attempt, launched=True)
        elif fence is not None:
            await releasing.remove_pod(self.ctx, fence)
        if current.state is records.SeatState.RUNNING and attempt is not None and attempt.launched:
            await self.writer.settle(current)

    async def _fence(
        self, name: str, attempt: pods.Attempt, report: observations.PassReport, *, precheck: bool
    ) -> writing.Fenced:
        """Fence the seat's current attempt, its authority released in the same write: the
        script's answer (with the fence it wrote and what deciding reads next). The script
        checks that the attempt is still the seat's current one."""
        # A held attempt fails every listing pass: a read first spares those passes a write.
        # (The watch reports a failure once; the script's own check is enough there.)
        refused = precheck and await reading.refusal(self.client, self.swarm, attempt.execution_id)
        if refused:
            # Held for the master or operator (the script checks again, atomically).
            report.held.append(attempt.execution_id)
            return writing.Fenced(transitions.FenceStatus.RESTORE_REFUSED)
        fenced = await self.writer.fence_returning(
            name, attempt.execution_id, attempt.generation, str(attempt.failure), authority=True
        )
        status = fenced.status
        if status is transitions.FenceStatus.FENCED:
            report.fenced.append(attempt.execution_id)
        elif status is transitions.FenceStatus.RESTORE_REFUSED:
            report.held.append(attempt.execution_id)
        elif status is transitions.FenceStatus.NOT_CURRENT:
            logs.event(
                log,
                "fence_refused",
                logging.WARNING,
                swarm=self.swarm,
                seat=attempt.seat,
                execution_id=attempt.execution_id,
                expected_generation=fenced.expected_generation,
                observed_generation=attempt.generation,
                controller_epoch=self.lease.epoch,
            )
        return fenced

    async def _missing(
        self, seat: records.Seat, passes: int, report: observations.PassReport
    ) -> pods.Attempt | None:
        """Count a pass without the seat's expected attempt in the list; the attempt to fence
        (evicted) once the count is reached, or None (counted, relaunched or stale)."""
        eid = seat.current_execution_id
        counted = await self.writer.absent(seat, eid, seat.generation, MISSING_PASSES)
        status = counted.status
        if status is housekeeping.AbsentStatus.STALE:
            return None
        if status is housekeeping.AbsentStatus.RELAUNCH:
            report.relaunched.append(eid)
            return None
        report.missing.append(eid)
        logs.event(
            log,
            "attempt_missing",
            logging.WARNING,
            swarm=self.swarm,
            seat=seat.seat,
            execution_id=eid,
            passes=passes + 1 if counted.passes is None else counted.passes,
            threshold=MISSING_PASSES,
        )
        if status is not housekeeping.AbsentStatus.EVICT:
            return None
        return pods.Attempt(
            swarm=self.swarm,
            seat=seat.seat,
            execution_id=eid,
            generation=seat.generation,
            failure=classifying.FailureReason.EVICTED,
            alive=False,
            departed=True,
        )


@dataclasses.dataclass
class _Decided:
    """Where a seat stands after fence, release and decide: what replacing reads next."""

    seat: records.Seat | None
    fence: records.Fence | None
    admission: admitting.Admission | None
    config: records.SwarmConfig | None


def _admitted(seen: observations.Seen) -> _Decided:
    """The seat as the decision call that admitted its replacement left it (`Seen.admitted`)."""
    admitted = seen.admitted
    assert admitted is not None
    admission = admitting.Admission(
        transitions.AcceptStatus.ACCEPTED,
        None,
        admitted.replacement,
        admitted.seat,
        admitted.config,
    )
    return _Decided(admitted.seat, admitted.fence, admission, admitted.config)
