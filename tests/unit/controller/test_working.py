"""`working.Session` and `sessions.Seats`, the seat queue's workers, with a stand-in reconcile
(issue 22: "a seat is worked by one worker at a time, a seat added while queued is not added
twice, a seat touched while being worked is worked again after"). Pure asyncio: no seat here
needs a Redis read (each brings a failure the watch saw), so no Redis runs."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Sequence
from typing import Any

import pytest

from services.controller import observations, sessions, working
from services.controller.pods import classifying
from services.controller.pods import runtime as pods
from services.controller.state import records, scripting

SWARM = "swarm-a"


def failed(seat: str, generation: int = 1) -> dict[str, observations.Seen]:
    """What the watch brings for a seat whose attempt failed: no read needed."""
    attempt = pods.Attempt(
        swarm=SWARM,
        seat=seat,
        execution_id=f"{SWARM}.{seat}.{generation}",
        generation=generation,
        failure=classifying.FailureReason.OOM_KILLED,
        alive=False,
    )
    return {seat: observations.Seen(failed=attempt, watched=True)}


class Work:
    """A stand-in reconcile: records each work, can hold a seat's work, can fail it."""

    def __init__(self) -> None:
        self.worked: collections.Counter[str] = collections.Counter()
        self.working: set[str] = set()
        self.overlaps: list[str] = []
        self.seen: dict[str, list[observations.Seen]] = collections.defaultdict(list)
        self.hold: dict[str, asyncio.Event] = {}
        self.entered: collections.defaultdict[str, asyncio.Event] = collections.defaultdict(
            asyncio.Event
        )
        self.raise_: dict[str, BaseException] = {}

    async def __call__(
        self,
        name: str,
        seat: records.Seat | None,
        read: bool,
        seen: observations.Seen,
        requests: Sequence[tuple[str, records.Request]],
        report: observations.PassReport,
    ) -> None:
        if name in self.working:
            self.overlaps.append(name)
        self.working.add(name)
        self.worked[name] += 1
        self.seen[name].append(seen)
        self.entered[name].set()
        try:
            if name in self.hold:
                await self.hold[name].wait()
            if name in self.raise_:
                raise self.raise_.pop(name)
            report.fenced.append(name)
        finally:
            self.working.discard(name)


def session(work: Work, *, concurrency: int = 4, claim: int = 4) -> working.Session:
    client: Any = None  # no seat here is read
    return working.Session(client, SWARM, work, concurrency=concurrency, claim=claim)


async def test_a_seat_brought_while_queued_is_worked_once_with_what_each_saw() -> None:
    """No duplicate while queued: a seat brought again before a worker takes it is worked
    once, with the newest failure either brought."""
    work = Work()
    s = session(work)
    s.bring(failed("a", 1))
    s.bring(failed("a", 2))
    waiters = s.bring(failed("a", 2), working.Wait.NEXT)
    s.start()
    report = observations.PassReport()
    await working.collect(waiters, report)
    assert work.worked == {"a": 1}
    assert [seen.failed.generation for seen in work.seen["a"] if seen.failed] == [2]
    s.halt(scripting.LeaseLost("done"))
    assert await s.stopped(5) == []


async def test_a_seat_brought_while_worked_waits_for_that_work_then_is_worked_again() -> None:
    """One worker per seat, and re-worked when touched mid-work: a new failure of a seat being
    worked is not handed to a second worker; it is worked after, once."""
    work = Work()
    gate = work.hold["a"] = asyncio.Event()
    s = session(work)
    s.start()
    first = s.bring(failed("a", 1), working.Wait.NEXT)
    await asyncio.wait_for(work.entered["a"].wait(), 5)
    second = s.bring(failed("a", 2), working.Wait.NEXT)
    s.bring(failed("a", 2))
    await asyncio.sleep(0.01)
    assert work.worked == {"a": 1}  # not handed to a second worker meanwhile
    del work.hold["a"]
    gate.set()
    await working.collect(first + second, observations.PassReport())
    assert work.worked == {"a": 2} and not work.overlaps
    assert [seen.failed.generation for seen in work.seen["a"] if seen.failed] == [1, 2]
    s.halt(scripting.LeaseLost("done"))
    assert await s.stopped(5) == []


async def test_leaving_the_seats_does_not_hang_when_the_session_halts_meanwhile() -> None:
    """The last caller to leave a session it started lets the queue run dry; when a seat's
    work finds the lease lost meanwhile (the session halts, cancelling a batch that had not
    started yet), leaving ends all the same and nothing is left running."""
    work = Work()
    gate = work.hold["a"] = asyncio.Event()
    work.raise_["a"] = scripting.LeaseLost("taken")
    seats = sessions.Seats(lambda: session(work, concurrency=1, claim=2))
    async with seats.using() as s:
        s.bring(failed("a"))
        await asyncio.wait_for(work.entered["a"].wait(), 5)

        async def storm() -> None:
            # The batch of "b" is spawned by the dispatcher just before "a" fails, in one
            # turn of the loop: halting cancels it before it ever ran.
            await asyncio.sleep(0.01)
            s.bring(failed("b"))
            gate.set()

        brought = asyncio.create_task(storm())
    await asyncio.wait_for(brought, 5)
    assert seats.session is None
    assert isinstance(s.failure, scripting.LeaseLost)
    assert await s.stopped(5) == []


async def test_a_session_halted_by_a_lost_lease_tells_everyone_waiting() -> None:
    """A lost lease halts the session at once: the waiters of the seat that found it and of
    seats still queued all learn it (a report marked lease_lost), and nothing more is worked."""
    work = Work()
    work.raise_["a"] = scripting.LeaseLost("taken")
    gate = work.hold["a"] = asyncio.Event()
    s = session(work, concurrency=1, claim=1)
    s.start()
    waiters = s.bring(failed("a"), working.Wait.NEXT)
    await asyncio.wait_for(work.entered["a"].wait(), 5)
    waiters += s.bring(failed("b"), working.Wait.NEXT)
    gate.set()
    report = observations.PassReport()
    await working.collect(waiters, report)
    assert report.lease_lost and work.worked == {"a": 1}
    with pytest.raises(scripting.LeaseLost):
        s.bring(failed("c"))
    assert await s.stopped(5) == []
