"""The recovery pass: fence → release → decide → replace → hold, under the swarm's lease.

`Recovery.reconcile` lists the swarm's attempts every pass, fences each failed current attempt,
and then, seat by seat, finishes whatever recovery the state records as unfinished: releases not
yet recorded in a fence, a fence without a decision, an admitted attempt not yet launched, a lost
attempt's Pod not yet removed. Then it applies recorded decision requests and drops them. Each
step is idempotent and recorded, so a controller killed between any two writes and restarted
finishes the work without doing any of it twice. A controller that lost its lease changes
nothing: its pass stops at the first refused write.

Order within a seat: fence, with the authority releases (worker credential and store grants
revoked, account slot ended) recorded in the same script; decide; launch the replacement; remove
the lost attempt's Pod. (A fence from an attempt found missing, and a fence left by a controller
that stopped before this order, get their authority releases in a script of their own.) The Pod
goes last because nothing waits on it: with its authority released the lost worker can do
nothing, so the replacement is not held up by a Pod deletion.

The watch's fast path. Between passes the runtime's watch hands over attempts whose own
worker status shows a failure (`pods.Change.failed`); `recover_failed` takes those seats
through the same steps at once, without listing the swarm, beside any listing pass that is
running. One seat is worked on by one of them at a time (a lock per seat), and a listing pass
skips a seat the fast path worked on after it listed (what it listed of it is stale; its next
pass looks again). Everything else the watch sees (a Pod deleted from under the runtime, a node
going NotReady, an image pull's grace running out) wakes a listing pass.

Refused restores are held. A replacement that reported a restore refusal is neither fenced nor
replaced, even once its worker exits non-zero: the accepted decision stays in place for the
master or operator (choosing again returns the same decision and replacement), its seat reads
`restore_refused`, its card shows the refusal and the task keeps `recovery_pending`. The operator
fixes the cause and deletes the failed worker (``kubectl delete pod …``); when the attempt is then
missing from the runtime's list for `MISSING_PASSES` consecutive passes, the pass clears the
refusal and launches the same execution again (same directive, execution id and generation),
with a `recovery` event (`action: relaunch`). It relaunches once per disappearance: a relaunched
attempt is held again only by a new refusal.

Offers follow the worker image. A pending decision records the offer its card shows with the
compatibility key (the controller's worker image tag) it was worked out under. When the
controller now runs another worker image, the pass works the offer out again under the current
key and records it (a `recovery` event with `action: reoffer`); it does not decide again, the
decision stays recovery_pending. A card read before that pass works the offer out itself
(`status`), so a card never offers a checkpoint that resume would refuse.

Missing attempts. Every launched, current, unfenced attempt is expected in the runtime's list
(`keys.expected`, read before the list so a launch during the pass is not counted). One that
holds no refusal and is missing for `MISSING_PASSES` consecutive passes (two, so a Pod still
being created is not taken for a lost one) is fenced with reason `evicted`: its Pod was removed
from under it, by a node drain or anyone else, and a restarted Kubernetes runtime no longer
remembers why. An attempt whose worker finished (exited 0) is expected no longer, so cleaning
up its Pod fences nothing. An attempt admitted but not launched yet is launched, as before.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from services.common import directives, errors, logs, redis_link, settings
from services.controller import (
    acknowledging,
    deciding,
    decisions,
    outcomes,
    replacing,
    sharing,
    swarms,
    telemetry,
)
from services.controller.pods import classifying
from services.controller.pods import runtime as pods
from services.controller.state import (
    durable,
    keys,
    leasing,
    reading,
    records,
    scripting,
    writing,
)

log = logging.getLogger("services.controller.recovery")

CONCURRENT_SEATS = 32
"""How many seats one pass works on at once."""

GIVE_WAY_S = 0.5
"""How long a listing pass waits, at each of its steps, for running fast-path recoveries to
finish before it goes on anyway (a fast path stuck on a slow API call must not stall passes)."""

HELPER_STOP_S = 10.0
"""How long stopping waits for the watch and fast-path tasks of a loop to end."""

MISSING_PASSES = 2
"""Consecutive passes an expected attempt must be missing from the runtime's list before the pass
acts on it (fences it evicted, or relaunches a refused replacement)."""


@dataclasses.dataclass
class PassReport:
    """What one pass did (for logs, metrics and tests)."""

    standby: bool = False
    lease_lost: bool = False
    fenced: list[str] = dataclasses.field(default_factory=list)
    pending: list[str] = dataclasses.field(default_factory=list)
    accepted: list[str] = dataclasses.field(default_factory=list)
    launched: list[str] = dataclasses.field(default_factory=list)
    held: list[str] = dataclasses.field(default_factory=list)
    """Failed replacements left alone because they reported a restore refusal."""
    missing: list[str] = dataclasses.field(default_factory=list)
    """Expected attempts the runtime's list did not show (counted towards `MISSING_PASSES`)."""
    relaunched: list[str] = dataclasses.field(default_factory=list)
    """Refused replacements whose deleted worker is launched again."""
    watched: bool = False
    """A watch's fast path over the seats of attempts it saw fail, not a listing pass."""
    requests_applied: int = 0
    requests_refused: int = 0
    errors: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0


class Recovery:
    """The controller core of one swarm: its pass, decisions, outcomes and status.

    Args:
        client: Redis.
        swarm: The swarm this controller recovers.
        runtime: Where the swarm's workers run.
        grant_key: The key grants and worker credentials are signed with.
        worker_image: The current worker image: the checkpoint compatibility key.
        checkpoints: Where checkpoints are listed; None: no store is configured.
        holder: This controller's lease holder id (fresh per process start by default).
        lease_ttl_ms: The lease's time to live.
        store_addr: The checkpoint-store address for launch records.
        entry_point: Put before the swarm's command when launching.
        scripts: A shared script runner (tests pass one with a crash hook).
        clock: Seconds since the epoch.
        link: Whether Redis answers (shared by a process's swarms); its own by default.
        share: Which swarm leases this replica may take or keep, when controllers share the
            swarms (`sharing.Sharing`); None: it takes every lease it can.
        redis_wait: How durable a write must be before a call is answered accepted (see
            `acknowledging`); by default nothing is waited for.
    """

    def __init__(
        self,
        client: redis_link.Client,
        swarm: str,
        runtime: pods.PodRuntime,
        *,
        grant_key: str,
        worker_image: str,
        checkpoints: replacing.CheckpointSource | None = None,
        holder: str | None = None,
        lease_ttl_ms: int = 10_000,
        store_addr: str | None = None,
        entry_point: tuple[str, ...] = (),
        scripts: scripting.Scripts | None = None,
        clock: writing.Clock = time.time,
        link: redis_link.RedisLink | None = None,
        share: sharing.Sharing | None = None,
        redis_wait: settings.RedisWait | None = None,
    ) -> None:
        self.client = client
        self.durability = durable.Durability(client, redis_wait or settings.RedisWait())
        self.link = link or redis_link.RedisLink(client)
        self.share = share
        # Set when the runtime's backend (the Kubernetes API) answers again after it did not:
        # a pass that failed on it waits for this rather than for its whole backoff.
        self._runtime_back = asyncio.Event()
        if isinstance(runtime, pods.Reachable):
            runtime.subscribe(self._runtime_changed)
        self.swarm = swarm
        self.runtime = runtime
        self.scripts = scripts or scripting.Scripts(client)
        self.lease = leasing.Lease(
            self.scripts, swarm, holder or leasing.new_holder(), ttl_ms=lease_ttl_ms
        )
        self.writer = writing.Writer(self.lease, clock=clock)
        self.ctx = replacing.Context(
            client=client,
            writer=self.writer,
            runtime=runtime,
            checkpoints=checkpoints or replacing.NoCheckpoints(),
            grant_key=grant_key,
            worker_image=worker_image,
            store_addr=store_addr,
            entry_point=entry_point,
        )
        # One seat is worked on by one pass at a time (a listing pass and the watch's fast path
        # run side by side); `_touched` counts the fast path's visits, so a listing pass can tell
        # that what it listed of a seat has been overtaken, and `_queued` the fast path's seats
        # not yet done, which a listing pass leaves to it.
        self._seat_locks: collections.defaultdict[str, asyncio.Lock] = collections.defaultdict(
            asyncio.Lock
        )
        self._touched: collections.Counter[str] = collections.Counter()
        self._queued: collections.Counter[str] = collections.Counter()
        # The running holder's inbox: failures the watch reported that the fast path has not
        # taken yet are the fast path's too.
        self._inbox: _Inbox | None = None
        # Set while no fast path runs: a listing pass waits for it between its steps (for at
        # most GIVE_WAY_S), so a failure's recovery does not queue behind a pass's routine work.
        self._fast_idle = asyncio.Event()
        self._fast_idle.set()
        self._fast_running = 0

    # The pass.

    async def reconcile(self) -> PassReport:
        """One recovery pass over the runtime's attempts and the recorded state.

        Returns:
            What the pass did; `lease_lost` when it stopped because the lease was lost (then
            it wrote nothing after the loss), `standby` when this controller holds no lease.
        """

        async def work(report: PassReport) -> None:
            requests = await self._recover_seats(report)
            applied, refused = await decisions.apply_requests(self.ctx, requests)
            report.requests_applied, report.requests_refused = applied, refused

        return await self._pass(PassReport(), work)

    async def recover_failed(self, attempts: Iterable[pods.Attempt]) -> PassReport:
        """The watch's fast path: recover the seats of attempts a watch saw fail, at once and
        without listing the swarm.

        Each seat goes through the same steps as in a listing pass (fence, release, decide,
        replace, then the lost attempt's Pod removed), one pass at a time per seat. What this
        misses (a write that failed, a seat whose attempt was already superseded) the next
        listing pass finds, as it would without a watch.
        """
        newest: dict[str, pods.Attempt] = {}
        for attempt in attempts:
            seen = newest.get(attempt.seat)
            if (
                attempt.swarm == self.swarm
                and attempt.failure is not None
                and (seen is None or attempt.generation > seen.generation)
            ):
                newest[attempt.seat] = attempt

        async def one(name: str) -> None:
            async with self._seat_locks[name]:
                self._touched[name] += 1
                # Fenced first, with nothing read: the fence script checks that the failed
                # attempt is still the seat's current one.
                await self._recover_seat(name, None, newest[name], {}, report, watched=True)

        report = PassReport(watched=True)
        self._fast_running += 1
        self._fast_idle.clear()
        self._queued.update(newest.keys())
        try:
            return await self._pass(report, lambda r: self._each(r, sorted(newest), one))
        finally:
            self._queued.subtract(newest.keys())
            self._queued += collections.Counter()  # drop the seats at zero
            self._fast_running -= 1
            if self._fast_running == 0:
                self._fast_idle.set()

    async def _pass(
        self, report: PassReport, work: Callable[[PassReport], Awaitable[None]]
    ) -> PassReport:
        started = time.monotonic()
        if not self.lease.is_held():
            report.standby = True
            return report
        try:
            await work(report)
        except scripting.LeaseLost:
            report.lease_lost = True
            logs.event(
                log,
                "pass_stopped",
                logging.WARNING,
                swarm=self.swarm,
                reason="lease_lost",
                holder=self.lease.holder,
            )
        report.seconds = time.monotonic() - started
        return report

    async def _recover_seats(self, report: PassReport) -> list[tuple[str, records.Request]]:
        """Recover every seat with work; returns the recorded requests read at the start."""
        # Only seats with a failed or missing attempt or unfinished work are read, so a pass over
        # a large healthy swarm costs one list call (from the watch's cache) and one round trip
        # (a read-only script: the expected hash, the attention set and its seats). What should
        # be listed is read before the list: an attempt launched meanwhile is not missing.
        await self._give_way()
        touched = self._touched.copy()
        # Seats the fast path has (a failure storm: most of them) are not even read; the
        # attention seats only awaiting their replacement's report (after a storm, perhaps all
        # the others) are sorted out by the same read, in Redis.
        reads = await reading.before_listing(
            self.lease.scripts,
            self.swarm,
            self._fast_seats(),
        )
        expected = reads.expected
        listed = await self.runtime.list_attempts(self.swarm)
        await self._give_way()
        listing = {a.execution_id: a for a in listed if a.swarm == self.swarm}
        failed: dict[str, pods.Attempt] = {}
        for attempt in listing.values():
            # The seat's newest failed attempt: a superseded one still listed (a Pod kept
            # Terminating by a finalizer) must not hide a failure of the current one.
            newest = failed.get(attempt.seat)
            if attempt.failure is not None and (
                newest is None or attempt.generation > newest.generation
            ):
                failed[attempt.seat] = attempt
        present = {e for e, a in listing.items() if not a.departed}
        missing = {e: n for e, n in expected.items() if e not in present}
        await self._note_listed(expected, listing, present)
        absent_seats = {name for e in missing if (name := keys.seat_of(e)) is not None}
        seats = {
            n: s
            for n, s in reads.seats.items()
            if n not in failed and s.current_execution_id not in missing
        }
        # The rest is read now: a seat whose attempt the list shows failed or missing (an
        # attention seat among them is read again, as the list is newer), and attention seats
        # the fast path had and no longer has.
        rest = sorted(
            n
            for n in set(failed) | absent_seats | (set(reads.attention) - reads.awaiting)
            if n not in seats and not self._fast_has(n)
        )
        if rest:
            seats.update((s.seat, s) for s in await reading.seats(self.client, self.swarm, rest))

        async def one(name: str) -> None:
            await self._give_way()
            if self._fast_has(name):
                # Being recovered from a watch event right now (perhaps held up by a slow
                # call), or waiting its turn to be: that recovery is on it, and the next pass
                # looks again. (Done twice, a seat costs a handful of reads for nothing.)
                return
            async with self._seat_locks[name]:
                if self._touched[name] != touched[name]:
                    # The watch's fast path worked on this seat since the list: what the list
                    # says of it is stale. The next pass reads it again.
                    return
                await self._recover_seat(name, seats[name], failed.get(name), missing, report)

        await self._each(report, sorted(seats), one)
        return reads.requests

    def _fast_seats(self) -> set[str]:
        """Every seat `_fast_has` says the fast path is on."""
        held = {n for n, lock in self._seat_locks.items() if lock.locked()}
        held.update(n for n, count in self._queued.items() if count > 0)
        if self._inbox is not None and not self._inbox.closed:
            held.update(self._inbox.seats)
        return held

    def _fast_has(self, name: str) -> bool:
        """Whether the watch's fast path is on the seat: working on it, holding it in a batch,
        or its failure waiting in the inbox for the next batch."""
        lock = self._seat_locks.get(name)
        return (
            (lock is not None and lock.locked())
            or self._queued[name] > 0
            or (self._inbox is not None and self._inbox.holds(name))
        )

    async def _give_way(self) -> None:
        """Let running fast-path recoveries finish first (for at most `GIVE_WAY_S`)."""
        if not self._fast_idle.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(GIVE_WAY_S):
                    await self._fast_idle.wait()

    async def _each(
        self, report: PassReport, names: list[str], step: Callable[[str], Awaitable[None]]
    ) -> None:
        """Run `step` for each seat, `CONCURRENT_SEATS` at a time, each guarded."""
        if len(names) == 1:
            # One seat (the watch's usual case): no task to schedule first.
            await self._guarded(report, names[0], step(names[0]))
            return
        limit = asyncio.Semaphore(CONCURRENT_SEATS)

        async def one(name: str) -> None:
            async with limit:
                await self._guarded(report, name, step(name))

        try:
            # Seats are independent (every write is its own atomic script); a TaskGroup also
            # cancels the other seats at once when one hits a lost lease or a crash.
            async with asyncio.TaskGroup() as group:
                for name in names:
                    group.create_task(one(name))
        except BaseExceptionGroup as group:
            # Only a lost lease (or the process being torn down) gets past `_guarded`; the
            # caller sees it as itself, not wrapped.
            raise group.exceptions[0] from None

    async def _note_listed(
        self,
        expected: Mapping[str, int],
        listing: Mapping[str, pods.Attempt],
        present: set[str],
    ) -> None:
        # Written only when something changed: a healthy pass writes nothing here.
        again = sorted(e for e, n in expected.items() if n > 0 and e in present)
        finished = sorted(
            e
            for e in expected
            if e in listing and listing[e].failure is None and not listing[e].alive
        )
        if again or finished:
            await self.writer.listed(again, finished)

    async def _guarded(self, report: PassReport, seat: str, step: Any) -> None:
        # One seat's trouble (a store or runtime hiccup) must not stall the other seats; the
        # next pass retries it. A lost lease, or Redis unreachable, stops the whole pass.
        try:
            await step
        except scripting.LeaseLost:
            raise
        except Exception as exc:
            if redis_link.unreachable(exc):
                raise  # Redis is gone: the whole pass stops and the loop waits for it
            report.errors.append(seat)
            logs.event(
                log,
                "seat_step_failed",
                logging.WARNING,
                swarm=self.swarm,
                seat=seat,
                exception=type(exc).__name__,
            )

    async def _fence(
        self, name: str, attempt: pods.Attempt, report: PassReport, *, precheck: bool
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
            return writing.Fenced("restore_refused")
        fenced = await self.writer.fence_returning(
            name, attempt.execution_id, attempt.generation, str(attempt.failure), authority=True
        )
        status = fenced.status
        if status == "fenced":
            report.fenced.append(attempt.execution_id)
        elif status == "restore_refused":
            report.held.append(attempt.execution_id)
        elif status == "not_current":
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
        self, seat: records.Seat, passes: int, report: PassReport
    ) -> pods.Attempt | None:
        """Count a pass without the seat's expected attempt in the list; the attempt to fence
        (evicted) once the count is reached, or None (counted, relaunched or stale)."""
        eid = seat.current_execution_id
        reply = await self.writer.absent(seat, eid, seat.generation, MISSING_PASSES)
        status = reply["status"]
        if status == "stale":
            return None
        if status == "relaunch":
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
            passes=reply.get("passes", passes + 1),
            threshold=MISSING_PASSES,
        )
        if status != "evict":
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

    async def _recover_seat(
        self,
        name: str,
        seat: records.Seat | None,
        failed: pods.Attempt | None,
        missing: Mapping[str, int],
        report: PassReport,
        *,
        watched: bool = False,
    ) -> None:
        """One seat's recovery. `seat` is the seat as the caller read it, or None (the watch's
        fast path, which fences the failed attempt before reading anything)."""
        reads: reading.FencedReads | None = None
        if failed is not None and (
            seat is None or seat.current_execution_id == failed.execution_id
        ):
            # The fence (with the authority releases) returns what the next steps read: one
            # round trip. A new fence has no decision yet.
            fenced = await self._fence(name, failed, report, precheck=not watched)
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
                    return
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
            fence = await replacing.release_authority(self.ctx, fence)
            if reads.decision is None:
                admission = await self._decide(fence, reads, report)
            elif reads.decision.state is records.DecisionState.RECOVERY_PENDING and not (
                deciding.offer_is_current(reads.decision, self.ctx.worker_image)
            ):
                await self._reoffer(fence, reads.decision)
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
                assert seat is not None  # read above whenever nothing was fenced
                expect = seat.current_execution_id
            current, attempt = await reading.seat_and_execution(
                self.client, self.swarm, name, expect
            )
        if current is None:
            return
        if current.current_execution_id != expect:
            attempt = await reading.execution(self.client, self.swarm, current.current_execution_id)
        config = reads.config if reads is not None else None
        if attempt is not None:
            # The replacement first, then the lost attempt's Pod (one write records both).
            launched, fence = await replacing.launch_replacing(
                self.ctx, attempt, fence, seat=current, config=config
            )
            if launched:
                report.launched.append(attempt.execution_id)
                attempt = dataclasses.replace(attempt, launched=True)
        elif fence is not None:
            await replacing.remove_pod(self.ctx, fence)
        if current.state is records.SeatState.RUNNING and attempt is not None and attempt.launched:
            await self.writer.settle(current)

    async def _decide(
        self, fence: records.Fence, reads: reading.FencedReads, report: PassReport
    ) -> replacing.Admission | None:
        """Resume at once or wait for a choice; the admission when one was attempted."""
        config, held, paused = reads.config, reads.execution, reads.paused
        found = await self.ctx.checkpoints.newest_compatible(fence.scope, self.ctx.worker_image)
        switches = deciding.Switches(
            automation=config.restore_automation if config else False,
            paused=paused,
            legacy_spawn=held.legacy_spawn if held else False,
        )
        plan = deciding.decide(fence, found, switches)
        if plan.action is not deciding.Action.WAIT:
            assert plan.choice is not None and plan.directive is not None
            assert plan.source is not None
            admission = await replacing.admit(
                self.ctx,
                fence,
                choice=plan.choice,
                directive=plan.directive,
                source=plan.source,
                agent=None,
                automatic=True,
                offer=plan.offer,
                config=config,
                read_back=False,
            )
            if admission.status == "accepted":
                report.accepted.append(fence.execution_id)
                return admission
            if admission.status != "paused":
                return admission
        detail = telemetry.detail(
            decision=records.RECOVERY_PENDING,
            reason=fence.reason,
            offer=plan.offer.to_json() if plan.offer else None,
        )
        if await self.writer.pend(fence, plan.offer, detail, self.ctx.worker_image) == "pending":
            report.pending.append(fence.execution_id)
        return None

    async def current_offer(self, fence: records.Fence) -> records.Offer | None:
        """The offer of a fenced attempt under the controller's current compatibility key: what
        `resume` would pick now (the same listing `decisions.choose` reads)."""
        found = await self.ctx.checkpoints.newest_compatible(fence.scope, self.ctx.worker_image)
        return deciding.offer(fence, found)

    async def _reoffer(self, fence: records.Fence, pending: records.Decision) -> None:
        """Record the pending decision's offer again, worked out under the current compatibility
        key (the worker image changed since it was recorded, or it was recorded without its
        key). Nothing is decided: the decision stays recovery_pending. When the checkpoint store
        cannot be listed the next pass tries again; the seat's other steps go on (its card works
        the offer out itself meanwhile)."""
        try:
            found = await self.current_offer(fence)
        except Exception as exc:
            logs.event(
                log,
                "reoffer_failed",
                logging.WARNING,
                swarm=self.swarm,
                execution_id=fence.execution_id,
                exception=type(exc).__name__,
            )
            return
        detail = telemetry.detail(
            decision=records.RECOVERY_PENDING,
            action="reoffer",
            reason=fence.reason,
            offer=found.to_json() if found else None,
            previous_offer=pending.offer.to_json() if pending.offer else None,
        )
        await self.writer.reoffer(fence, found, self.ctx.worker_image, detail)

    async def _card_offer(self, fence: records.Fence) -> records.Offer | None:
        """`current_offer` for a card whose recorded offer is not current. A read must not fail
        on the checkpoint store: when it cannot be listed the card offers nothing (only fresh),
        never more than resume would deliver."""
        try:
            return await self.current_offer(fence)
        except Exception as exc:
            logs.event(
                log,
                "card_offer_unavailable",
                logging.WARNING,
                swarm=self.swarm,
                execution_id=fence.execution_id,
                exception=type(exc).__name__,
            )
            return None

    async def run(
        self,
        stop: asyncio.Event,
        *,
        interval_s: float = 2.0,
        on_pass: Callable[[PassReport], None] | None = None,
    ) -> None:
        """Wait for the lease as a standby, then recover while holding it, until `stop` is set.

        Listing passes run when the runtime's watch asks for one and at least every
        `interval_s`; attempts the watch saw fail are recovered at once by `recover_failed`,
        beside them (the watch's fast path). `on_pass` sees each pass's report (metrics).

        Nothing ends this loop but `stop`. When Redis stops answering (a pass, the fast path,
        the lease renewer or the link's own ping sees it) the loop logs one line
        (`swarm_loop_interrupted`), waits with a backoff until Redis answers again, acquires
        the lease again (the same epoch when it survived, a new one when it expired) and goes
        on: every write is an idempotent script under the lease, so the pass that follows
        finishes what the interrupted one started, once. A pass that fails otherwise is logged
        (`pass_failed`) and tried again after a backoff, under the same lease; anything else
        that goes wrong is logged (`swarm_loop_failed`) and retried like an interruption.
        """
        backoff = redis_link.Backoff()
        await self.link.start()
        try:
            while not stop.is_set():
                try:
                    if await self._hold(stop, interval_s, on_pass):
                        backoff.reset()
                    continue
                except Exception as exc:
                    failure: BaseException = exc
                delay = backoff.next()
                unreachable = isinstance(failure, _Interrupted) or redis_link.unreachable(failure)
                if unreachable:
                    self.link.suspect()
                logs.event(
                    log,
                    "swarm_loop_interrupted" if unreachable else "swarm_loop_failed",
                    logging.WARNING if unreachable else logging.ERROR,
                    swarm=self.swarm,
                    holder=self.lease.holder,
                    exception=(
                        failure.cause
                        if isinstance(failure, _Interrupted)
                        else type(failure).__name__
                    ),
                    retry_in_s=delay,
                    **({"variable": redis_link.VARIABLE} if unreachable else {}),
                )
                if await redis_link.wait(stop, delay):
                    break
                if unreachable and not await self.link.wait_up(stop):
                    break
        finally:
            await self._release()
            await self.link.stop()

    async def _release(self) -> None:
        """Give the lease up on a clean stop; with Redis unreachable it expires on its own."""
        try:
            await self.lease.release()
        except Exception as exc:
            self.lease.forget()
            logs.event(
                log,
                "lease_release_failed",
                logging.WARNING,
                swarm=self.swarm,
                holder=self.lease.holder,
                exception=type(exc).__name__,
            )

    async def _hold(
        self,
        stop: asyncio.Event,
        interval_s: float,
        on_pass: Callable[[PassReport], None] | None,
    ) -> bool:
        """Acquire the lease (or wait a while as a standby) and work while holding it.

        Returns True when it ended after at least one finished pass or as a standby (nothing
        went wrong), False when the lease was lost before. Raises what interrupted it: a Redis
        error, or `_Interrupted` when the renewer, the fast path or the link saw Redis go.
        """
        if self.link.down.is_set():
            raise _Interrupted("redis_unavailable")
        shared: tuple[asyncio.Event, ...] = ()
        if self.share is not None:
            shared = (self.share.wake(self.swarm),)
            shared[0].clear()
        if (self.share is not None and not self.share.may_take(self.swarm)) or (
            not await self.lease.acquire()
        ):
            # A standby: woken by a heartbeat (the share may have changed), else polled.
            await _first((stop, self.link.down, *shared), self.lease.ttl_ms / 3000)
            return True
        inbox = _Inbox()
        self._inbox = inbox
        helpers = [
            asyncio.create_task(self._watch(inbox, stop), name=f"recovery-watch-{self.swarm}"),
            asyncio.create_task(self._fast(inbox, on_pass), name=f"recovery-{self.swarm}"),
        ]
        passed = False
        handing_back = False
        runtime_down = False
        retries = redis_link.Backoff()
        try:
            async with self.lease.renewing():
                while not stop.is_set() and not self.lease.lost.is_set():
                    self._check_interrupted(inbox)
                    if self.share is not None and not self.share.may_keep(self.swarm):
                        handing_back = True
                        break
                    for event in (inbox.relist, *shared):
                        event.clear()
                    wakes: tuple[asyncio.Event, ...] = (
                        inbox.lease_lost,
                        inbox.interrupted,
                        stop,
                        self.lease.lost,
                        self.lease.interrupted,
                        self.link.down,
                        *shared,
                    )
                    try:
                        report = await self.reconcile()
                    except pods.PodsUnavailable as exc:
                        # The Kubernetes API does not answer: the runtime logs one line per
                        # step of its own backoff; the pass is tried again when it answers.
                        delay = retries.next()
                        if not runtime_down:
                            runtime_down = True
                            logs.event(
                                log,
                                "swarm_loop_interrupted",
                                logging.WARNING,
                                swarm=self.swarm,
                                holder=self.lease.holder,
                                dependency="kubernetes",
                                exception=type(exc).__name__,
                                retry_in_s=delay,
                            )
                        self._runtime_back.clear()
                        await _first((*wakes, self._runtime_back), delay)
                        continue
                    except Exception as exc:
                        if redis_link.unreachable(exc):
                            raise
                        # Not Redis (the runtime's list, a surprise): the lease is kept and
                        # the pass is tried again after a backoff, the watch's cue aside.
                        delay = retries.next()
                        logs.event(
                            log,
                            "pass_failed",
                            logging.ERROR,
                            swarm=self.swarm,
                            exception=type(exc).__name__,
                            retry_in_s=delay,
                        )
                        await _first(wakes, delay)
                        continue
                    retries.reset()
                    if runtime_down:
                        runtime_down = False
                        logs.event(
                            log, "swarm_loop_resumed", swarm=self.swarm, dependency="kubernetes"
                        )
                    if on_pass is not None:
                        on_pass(report)
                    if report.lease_lost or inbox.lease_lost.is_set():
                        break
                    passed = True
                    await _first((inbox.relist, *wakes), interval_s)
        except BaseException:
            # Interrupted: whatever the lease's local view says, this holder works no more
            # under it until it acquired it again.
            self.lease.forget()
            raise
        finally:
            # Closed first: a fast path whose cancellation a client library swallowed
            # still ends at its next wait.
            inbox.close()
            self._inbox = None
            for helper in helpers:
                helper.cancel()
            # Every helper is waited for, but not forever (a call stuck past its cancel).
            ended, stuck = await asyncio.wait(helpers, timeout=HELPER_STOP_S)
            for helper in ended:
                if not helper.cancelled():
                    helper.exception()  # retrieved: the helpers log their own failures
            for helper in stuck:
                logs.event(
                    log,
                    "helper_stop_timeout",
                    logging.WARNING,
                    swarm=self.swarm,
                    helper=helper.get_name(),
                )
        if handing_back:
            # Another live replica should hold this swarm (this one holds more than its share):
            # released once nothing of this holder's runs, so the new owner takes it at once.
            await self.lease.release()
            logs.event(log, "lease_handed_back", swarm=self.swarm, holder=self.lease.holder)
        return passed or handing_back

    def _runtime_changed(self, available: bool) -> None:
        if available:
            self._runtime_back.set()

    def _check_interrupted(self, inbox: _Inbox) -> None:
        if inbox.interrupted.is_set():
            raise _Interrupted(inbox.cause or "redis_unavailable")
        if self.lease.interrupted.is_set() or self.link.down.is_set():
            raise _Interrupted("redis_unavailable")

    async def _watch(self, inbox: _Inbox, stop: asyncio.Event) -> None:
        """Follow the runtime's watch; when it fails or ends, log it and follow it again after
        a backoff (a pass is asked for first: what happened meanwhile was not seen). A watch
        that fails only costs promptness: passes still run every interval."""
        backoff = redis_link.Backoff()
        while not stop.is_set() and not inbox.closed:
            failure: str | None = None
            try:
                async for change in self.runtime.watch(self.swarm):
                    inbox.put(change)
                    backoff.reset()
            except Exception as exc:
                failure = type(exc).__name__
            if stop.is_set() or inbox.closed:
                return
            delay = backoff.next()
            logs.event(
                log,
                "watch_failed" if failure else "watch_ended",
                logging.WARNING,
                swarm=self.swarm,
                exception=failure,
                retry_in_s=delay,
            )
            await asyncio.sleep(delay)
            inbox.put(pods.Change(relist=True))

    async def _fast(self, inbox: _Inbox, on_pass: Callable[[PassReport], None] | None) -> None:
        while True:
            await inbox.urgent.wait()
            if inbox.closed:
                return
            try:
                report = await self.recover_failed(inbox.take())
            except Exception as exc:
                # The seats it took are found again by the next listing pass (their workers
                # still show the failure), after Redis answers when it was Redis.
                if redis_link.unreachable(exc):
                    inbox.interrupt(type(exc).__name__)
                    return
                logs.event(
                    log,
                    "fast_path_failed",
                    logging.ERROR,
                    swarm=self.swarm,
                    exception=type(exc).__name__,
                )
                inbox.relist.set()
                continue
            if on_pass is not None:
                on_pass(report)
            if report.lease_lost:
                inbox.lease_lost.set()
                return

    # Switches.

    async def pause(self) -> None:
        """Set the swarm's recovery-paused key: failures are fenced and released but wait for
        an explicit decision. The switch survives a controller restart. Returns once the
        switch is durable (`acknowledging`)."""
        await self.writer.set_paused(True)
        await acknowledging.paused(self.durability, self.swarm, True)

    async def unpause(self) -> None:
        """Clear the swarm's recovery-paused key (returns once that is durable)."""
        await self.writer.set_paused(False)
        await acknowledging.paused(self.durability, self.swarm, False)

    async def paused(self) -> bool:
        return await reading.paused(self.client, self.swarm)

    # Calls the API layer makes.

    async def apply_swarm(self, document: str | Mapping[str, Any]) -> swarms.Applied:
        """Declare or update this swarm from a document (see `swarms.apply`); returns once the
        admission is durable (`acknowledging`)."""
        parsed = swarms.parse(document)
        applied = await swarms.apply(self.ctx, parsed)
        await acknowledging.admitted(self.durability, parsed)
        return applied

    async def restore_decision(
        self,
        execution_or_seat: str,
        choice: records.Choice,
        agent: str | None,
        caller: records.Principal,
    ) -> decisions.Result:
        """Choose resume or fresh now (see `decisions.restore_decision`); returns once the
        decision is durable (`acknowledging`), a repeated one too."""
        result = await decisions.restore_decision(
            self.ctx, execution_or_seat, choice, agent, caller
        )
        await acknowledging.decided(self.durability, self.swarm, result.decision)
        return result

    async def request_restore_decision(
        self,
        execution_or_seat: str,
        choice: records.Choice,
        agent: str | None,
        caller: records.Principal,
    ) -> decisions.Recorded:
        """Record the choice for the next pass (see `decisions.request_restore_decision`)."""
        return await decisions.request_restore_decision(
            self.ctx, execution_or_seat, choice, agent, caller
        )

    async def report_restore(
        self,
        caller: records.Principal,
        *,
        recovery: directives.Continuity,
        checkpoint_id: str | None,
        session_id: str | None,
        watermark: int | None,
    ) -> outcomes.Reported:
        """Store a replacement's outcome (see `outcomes.report_restore`); returns once the
        outcome is durable (`acknowledging`), a repeated one too."""
        reported = await outcomes.report_restore(
            self.ctx,
            caller,
            recovery=recovery,
            checkpoint_id=checkpoint_id,
            session_id=session_id,
            watermark=watermark,
        )
        await acknowledging.reported(self.durability, self.swarm, reported.outcome)
        return reported

    async def report_refusal(self, caller: records.Principal, reason: str) -> None:
        """Keep a replacement's restore refusal (see `outcomes.report_refusal`)."""
        await outcomes.report_refusal(self.ctx, caller, reason)

    async def report_capture(
        self,
        caller: records.Principal,
        *,
        native_session_id: str | None,
        archive_watermark: int | None,
        checkpoint_id: str | None = None,
        final: bool = False,
    ) -> None:
        """Record a running attempt's session and watermark (see `outcomes.report_capture`)."""
        await outcomes.report_capture(
            self.ctx,
            caller,
            native_session_id=native_session_id,
            archive_watermark=archive_watermark,
            checkpoint_id=checkpoint_id,
            final=final,
        )

    async def launch_record(self, caller: records.Principal) -> replacing.LaunchRecord:
        """The calling attempt's launch record (see `replacing.launch_record`)."""
        return await replacing.launch_record(self.ctx, caller)

    async def status(self) -> reading.SwarmStatus:
        """Tasks, seats, handoff cards, pause state and counters (a read: no lease needed).

        Each card's offer is the one under this controller's current compatibility key: the
        recorded offer when it was worked out under that key, else worked out again now."""
        return await reading.status(
            self.client, self.swarm, self.ctx.worker_image, reoffer=self._card_offer
        )

    async def restore_outcomes_by_type(self) -> dict[str, int]:
        """Verified outcomes counted as native, reconstructed and fresh."""
        return await outcomes.restore_outcomes_by_type(self.ctx)

    async def events(
        self, after: str | None = None, block_ms: int | None = None
    ) -> list[telemetry.Event]:
        """Fence, recovery and outcome events after a stream id (for `WatchRecovery`), once
        they are durable (`acknowledging`): a watcher, such as the CLI waiting for the pass
        that applies its request, is never shown a decision Redis may still lose."""
        found = await telemetry.read(self.client, self.swarm, after=after, block_ms=block_ms)
        if found:
            await acknowledging.shown(self.durability, self.swarm, found[-1].id)
        return found


class _Inbox:
    """What a runtime's watch reported and no pass has taken yet."""

    def __init__(self) -> None:
        self.relist = asyncio.Event()
        self.urgent = asyncio.Event()
        self.lease_lost = asyncio.Event()
        self.interrupted = asyncio.Event()
        self.cause: str | None = None
        self.closed = False
        self._failed: dict[str, pods.Attempt] = {}
        self._seats: set[str] = set()

    @property
    def seats(self) -> frozenset[str]:
        """The seats whose failures wait in the inbox."""
        return frozenset(self._seats)

    def holds(self, seat: str) -> bool:
        """Whether a failure of the seat waits here (for the fast path's next batch)."""
        return not self.closed and seat in self._seats

    def interrupt(self, cause: str) -> None:
        """A helper lost Redis: the holder stops and waits for it."""
        self.cause = cause
        self.interrupted.set()

    def close(self) -> None:
        """No more recoveries from this inbox: a waiting fast path wakes and ends."""
        self.closed = True
        self.urgent.set()

    def put(self, change: pods.Change) -> None:
        if change.relist:
            self.relist.set()
        if change.failed:
            self._failed.update((a.execution_id, a) for a in change.failed)
            self._seats.update(a.seat for a in change.failed)
            self.urgent.set()

    def take(self) -> list[pods.Attempt]:
        failed, self._failed = list(self._failed.values()), {}
        self._seats = set()
        self.urgent.clear()
        return failed


class _Interrupted(Exception):
    """The holder stopped because Redis stopped answering (seen by a helper or the link)."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


async def _first(events: Iterable[asyncio.Event], timeout: float) -> None:
    """Wait until one of `events` is set, at most `timeout` seconds."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
        await asyncio.gather(*waits, return_exceptions=True)


def refusal_of(exc: BaseException) -> errors.Refusal | None:
    """The refusal a core call raised, with LeaseLost as `Unavailable` (a standby writes
    nothing and answers UNAVAILABLE) and an unreachable Redis as `Unavailable`
    (`redis_unavailable`)."""
    if isinstance(exc, scripting.LeaseLost):
        return errors.Unavailable("not_leader", "this controller does not hold the lease")
    if isinstance(exc, errors.Refusal):
        return exc
    return redis_link.refusal_of(exc)
