"""The seat queue's workers: one swarm's seats worked from one `queueing.WorkQueue`.

What finds work for a seat only *brings* it (`Session.bring`): the watch, the resync, a
decision call. What each saw is merged into the seat's `observations.Seen` while it waits; the
worker that takes the seat takes that with it and runs the one reconcile
(`reconciling.Reconciler.seat`). Workers take several ready seats at once, read those that
need a read in one round trip (a failure the watch saw needs none: it is fenced first) and work
up to `concurrency` seats at a time. A failed step brings its seat back after a per-seat
backoff; a lost lease, Redis out of reach or a crash halts the session: nothing more is worked
and everyone waiting is told. A caller may wait for the work on the seats it brought (`Wait`);
work nobody waits for goes to `on_report`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

from services.common import logs, redis_link, waiting
from services.controller import observations, queueing
from services.controller.state import keys, reading, records, scripting

log = logging.getLogger("services.controller.recovery")

Requests = Sequence[tuple[str, records.Request]]
Work = Callable[
    [str, records.Seat | None, bool, observations.Seen, Requests, observations.PassReport],
    Awaitable[None],
]
"""One seat's reconcile: its name, its record as read (or None), whether it was read, what was
seen, its recorded requests, and the report to fill."""


Waiter = asyncio.Future[observations.PassReport]
"""Resolved with the report of a seat's work (or what halted the queue)."""


class Wait(enum.Enum):
    """What a caller of `Session.bring` waits for."""

    NONE = "none"
    """Nothing: the watch, a recorded request."""
    NEW = "new"
    """The seats the queue did not hold (queued or being worked on): a pass. A seat the
    queue holds is reported by whoever brought it first (or to `on_report`)."""
    NEXT = "next"
    """Each seat's next work, whoever else waits: a decision call."""


@dataclasses.dataclass
class _Pending:
    """What was seen of a seat since a worker last took it, and who waits for its next work."""

    seen: observations.Seen = dataclasses.field(default_factory=observations.Seen)
    waiters: list[Waiter] = dataclasses.field(default_factory=list)


class Session:
    """One run of a swarm's seat queue and its workers (see the module docstring).

    Args:
        client: Redis (the batched reads).
        swarm: The swarm.
        work: One seat's reconcile.
        concurrency: Seats worked at once.
        claim: Seats taken from the queue at once (read together, then worked as slots free).
        on_report: Where work nobody waited for is reported (metrics); None: nowhere.
        backoff: The per-seat backoff after a failed step.
    """

    def __init__(
        self,
        client: redis_link.Client,
        swarm: str,
        work: Work,
        *,
        concurrency: int,
        claim: int,
        on_report: Callable[[observations.PassReport], None] | None = None,
        backoff: queueing.Backoff | None = None,
    ) -> None:
        self.client = client
        self.swarm = swarm
        self.work = work
        self.concurrency = concurrency
        self.claim = max(claim, concurrency)
        self.on_report = on_report
        self.queue: queueing.WorkQueue[str] = queueing.WorkQueue(backoff=backoff)
        self.users = 0
        self.holder = False
        """Whether the lease holder's loop runs this session (it ends it; callers only join)."""
        self.failure: BaseException | None = None
        self.halted = asyncio.Event()
        self._pending: dict[str, _Pending] = {}
        self._taken: dict[str, _Pending] = {}
        """What the work on each seat being worked on took with it, and who waits for it."""
        self._worked: set[str] = set()
        """Seats whose work ended well since the last `known`."""
        self._slots = asyncio.Semaphore(concurrency)
        self._claimed = 0
        self._room = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    # Callers.

    def bring(self, seen: Mapping[str, observations.Seen], wait: Wait = Wait.NONE) -> list[Waiter]:
        """Queue each seat with what was seen of it; the futures of what `wait` waits for.

        Raises:
            What halted the session, when it was halted.
        """
        if self.failure is not None:
            raise self.failure
        loop = asyncio.get_running_loop()
        futures: list[Waiter] = []
        for name in sorted(seen):
            taken = self._taken.get(name)
            if wait is not Wait.NEXT and taken is not None and taken.seen.covers(seen[name]):
                # Being worked on with all of this already: a resync that saw nothing new of
                # the seat leaves it to that work, rather than have it worked again after.
                continue
            pending = self._pending.get(name)
            if pending is None:
                pending = self._pending[name] = _Pending()
            held = self.queue.holds(name)
            pending.seen.merge(seen[name])
            if wait is Wait.NEXT or (wait is Wait.NEW and not held):
                future: Waiter = loop.create_future()
                pending.waiters.append(future)
                futures.append(future)
            self.queue.add(name)
        return futures

    @property
    def busy(self) -> bool:
        """Whether seats are queued or being worked on."""
        return len(self.queue) > 0 or self._claimed > 0

    def held(self) -> frozenset[str]:
        """The seats queued or being worked on."""
        return self.queue.held()

    def known(self) -> frozenset[str]:
        """What a resync need not read again, and from now on what it may: the seats queued or
        being worked on (their worker reads them) and those whose work ended well since the
        last call (read and reconciled since the resync before; the next one reads them). In
        a storm that spares a resync every seat just replaced and awaiting its report."""
        known, self._worked = self.queue.held() | self._worked, set()
        return known

    # Lifecycle.

    def start(self) -> None:
        self._spawn(self._dispatch(), f"seat-queue-{self.swarm}")

    def halt(self, failure: BaseException) -> None:
        """Stop at once: nothing more is handed out, the seats being worked are cancelled, and
        everyone waiting gets `failure` (the first one, when halted again)."""
        if self.failure is None:
            self.failure = failure
        self.halted.set()
        self.queue.shut_down()
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        # Those waiting for seats taken (a batch cancelled before it ran tells nobody) and for
        # seats still queued.
        for pending in (*self._taken.values(), *self._pending.values()):
            _fail(pending.waiters, self.failure)
        self._pending.clear()

    async def run_dry(self) -> None:
        """Wait until no seat is queued or being worked on, or the session halted (a batch
        cancelled before it began is never done: the queue alone would wait forever)."""
        await waiting.first((self.queue.idle_event, self.halted))

    async def stopped(self, timeout: float | None = None) -> list[asyncio.Task[None]]:
        """Wait for the workers to end (at most `timeout`); those still running then."""
        tasks = set(self._tasks)
        if not tasks:
            return []
        if self.halted.is_set():
            # Cancelled by `halt`, and again while they run: a cancellation can be lost.
            return await waiting.cancel(tasks, timeout)
        _, stuck = await asyncio.wait(tasks, timeout=timeout)
        return list(stuck)

    # Workers.

    def _spawn(self, coro: Awaitable[None], name: str) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _dispatch(self) -> None:
        """Take ready seats while there is room, and work each batch in a task of its own."""
        try:
            while True:
                while self._claimed >= self.claim:
                    self._room.clear()
                    await self._room.wait()
                names = await self.queue.get_batch(self.claim - self._claimed)
                # Taken with what was seen of them, before anything else runs: whatever is
                # brought from now on is for the next work on the seat.
                batch = [(name, self._pending.pop(name, _Pending())) for name in names]
                for name, pending in batch:
                    self._taken[name] = pending
                self._claimed += len(batch)
                self._spawn(self._batch(batch), f"seats-{self.swarm}")
        except queueing.ShutDown:
            return

    async def _batch(self, batch: list[tuple[str, _Pending]]) -> None:
        read = [name for name, pending in batch if pending.seen.needs_read]
        try:
            seats, requests = await self._read(read, any(p.seen.requests for _, p in batch))
        except BaseException as exc:
            for name, pending in batch:
                self._finish(name, pending, observations.PassReport(), exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        readset = set(read)
        steps = [
            self._one(
                name,
                pending,
                seats.get(name),
                name in readset,
                [r for r in requests if keys.seat_of(r[1].execution_id) == name],
            )
            for name, pending in batch
        ]
        if len(steps) == 1:
            await steps[0]  # the watch's usual case: no task to schedule first
        else:
            await asyncio.gather(*steps)

    async def _read(
        self, names: list[str], requests: bool
    ) -> tuple[dict[str, records.Seat], list[tuple[str, records.Request]]]:
        """The seats' records and, when asked, the recorded requests: one round trip each,
        sent together."""
        if not names and not requests:
            return {}, []
        if not requests:
            found = await reading.seats(self.client, self.swarm, names)
            return {s.seat: s for s in found}, []
        if not names:
            return {}, await reading.requests(self.client, self.swarm)
        found, recorded = await asyncio.gather(
            reading.seats(self.client, self.swarm, names),
            reading.requests(self.client, self.swarm),
        )
        return {s.seat: s for s in found}, recorded

    async def _one(
        self,
        name: str,
        pending: _Pending,
        seat: records.Seat | None,
        read: bool,
        requests: list[tuple[str, records.Request]],
    ) -> None:
        report = observations.PassReport(
            watched=pending.seen.watched, queued=not pending.seen.watched
        )
        failure: BaseException | None = None
        try:
            async with self._slots:
                await self.work(name, seat, read, pending.seen, requests, report)
            self.queue.forget(name)
        except BaseException as exc:
            failure = exc
        self._finish(name, pending, report, failure)
        if isinstance(failure, asyncio.CancelledError):
            raise failure

    def _finish(
        self,
        name: str,
        pending: _Pending,
        report: observations.PassReport,
        failure: BaseException | None,
    ) -> None:
        self.queue.done(name)
        self._taken.pop(name, None)
        self._claimed -= 1
        self._room.set()
        if failure is not None and _fatal(failure):
            self.halt(failure)
            _fail(pending.waiters, self.failure or failure)
            return
        if failure is not None:
            # One seat's trouble (a store or runtime hiccup) must not stall the others: the
            # seat comes back after its backoff (and with the next resync).
            report.errors.append(name)
            logs.event(
                log,
                "seat_step_failed",
                logging.WARNING,
                swarm=self.swarm,
                seat=name,
                exception=type(failure).__name__,
            )
            again = self._pending.setdefault(name, _Pending())
            again.seen.merge(pending.seen.retry())
            self.queue.add_rate_limited(name)
        else:
            self._worked.add(name)
        waiting = [w for w in pending.waiters if not w.done()]
        for waiter in waiting:
            waiter.set_result(report)
        if not waiting and self.on_report is not None:
            self.on_report(report)


async def collect(futures: list[Waiter], report: observations.PassReport) -> None:
    """Wait for the work on the seats a caller brought and add it to its report; a lost lease
    marks the report, anything else that halted the queue is raised."""
    raised: BaseException | None = None
    for outcome in await asyncio.gather(*futures, return_exceptions=True):
        if isinstance(outcome, observations.PassReport):
            report.add(outcome)
        elif isinstance(outcome, scripting.LeaseLost):
            report.lease_lost = True
        elif raised is None:
            raised = outcome
    if raised is not None:
        raise raised


def _fatal(failure: BaseException) -> bool:
    """A failure that stops the whole session: a lost lease, Redis out of reach, or anything
    that is not an `Exception` (a cancellation, a crash)."""
    return (
        not isinstance(failure, Exception)
        or isinstance(failure, scripting.LeaseLost)
        or redis_link.unreachable(failure)
    )


def _fail(waiters: list[Waiter], failure: BaseException) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_exception(failure)
