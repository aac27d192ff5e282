"""The writes that keep a seat's books: its attempt launched, its place on the attention set,
the attempts the runtime's list should show, recorded decision requests and the pause switch."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from services.controller.state import guarded, housekeeping, keys, records, transitions


@dataclasses.dataclass(frozen=True)
class Counted:
    """The answer of `Bookkeeping.absent`: the count of passes without the attempt (but
    `stale`)."""

    status: housekeeping.AbsentStatus
    passes: int | None = None


class Bookkeeping(guarded.Guarded):
    """A seat's books (part of `writing.Writer`)."""

    async def launched(
        self,
        execution: records.Execution,
        seat: records.Seat,
        *,
        removed: str | None = None,
        at: str | None = None,
    ) -> transitions.LaunchedStatus:
        """Record that the attempt's Pod was launched: `launched`, `already` or `missing`.
        `removed` names a fenced attempt whose Pod was removed since: its fence records that
        release in the same write (recorded at `at`, now when None)."""
        s, e = self.swarm, execution.execution_id
        fenced = seat.fenced_execution_id
        reply = await self._run(
            transitions.Launched(
                execution=keys.execution(s, e),
                seat=keys.seat(s, seat.seat),
                attention=keys.attention(s),
                fence=keys.fence(s, fenced or e),
                expected=keys.expected(s),
                removed_fence=keys.fence(s, removed or e),
                at=at or self.now(),
                fenced=bool(fenced),
                removed=bool(removed),
            )
        )
        return reply.status

    async def settle(self, seat: records.Seat) -> housekeeping.SettleStatus:
        """Take a seat with nothing left to do off the pass's attention set: `settled`, or
        `busy` when the script found it still busy."""
        s, current = self.swarm, seat.current_execution_id
        fenced = seat.fenced_execution_id
        reply = await self._run(
            housekeeping.Settle(
                attention=keys.attention(s),
                seat=keys.seat(s, seat.seat),
                execution=keys.execution(s, current),
                fence=keys.fence(s, fenced or current),
                fenced=bool(fenced),
            )
        )
        return reply.status

    async def absent(
        self, seat: records.Seat, execution: str, generation: int, threshold: int
    ) -> Counted:
        """Count one more pass whose runtime list did not show an expected attempt: `counted`
        (below `threshold`), `evict` (fence it evicted), `relaunch` (its restore refusal was
        cleared and it is recorded as not launched, to be launched again), or `stale` (not the
        seat's launched running attempt any more); with the count of passes."""
        s = self.swarm
        reply = await self._run(
            housekeeping.Absent(
                seat=keys.seat(s, seat.seat),
                execution=keys.execution(s, execution),
                refusal=keys.refusal(s, execution),
                expected=keys.expected(s),
                attention=keys.attention(s),
                events=keys.events(s),
                execution_id=execution,
                generation=generation,
                threshold=threshold,
                at=self.now(),
                swarm=s,
            )
        )
        return Counted(reply.status, reply.fields.get("passes"))

    async def listed(
        self, again: Sequence[str], finished: Sequence[str]
    ) -> housekeeping.ListedStatus:
        """Record what the runtime's list showed of expected attempts: `again` (listed after a
        pass without them) count from zero, `finished` (exited 0) are expected no longer."""
        s = self.swarm
        reply = await self._run(
            housekeeping.Listed(
                expected=keys.expected(s),
                refusals=tuple(keys.refusal(s, e) for e in finished),
                again=list(again),
                finished=list(finished),
            )
        )
        return reply.status

    async def record_request(self, request: records.Request) -> housekeeping.RequestStatus:
        """Record a request for the next pass: `recorded`, or `exists` when the same one is
        already recorded."""
        reply = await self._run(
            housekeeping.Request(
                requests=keys.requests(self.swarm),
                field=keys.request_field(request.execution_id, request.choice.value),
                request=request.to_json(),
            )
        )
        return reply.status

    async def drop_request(
        self, field: str, *, execution_id: str = "", seat: str = "", detail: str = ""
    ) -> housekeeping.Dropped:
        """Drop a request the pass refused or found already decided; with `execution_id`, in
        the same write a `request` event says why (what a waiting CLI follows)."""
        s = self.swarm
        reply = await self._run(
            housekeeping.DropRequest(
                requests=keys.requests(s),
                events=keys.events(s),
                field=field,
                execution_id=execution_id,
                swarm=s,
                seat=seat,
                detail=detail,
                at=self.now(),
            )
        )
        return reply.status

    async def mark_state_lost(self, loss: str) -> None:
        """Set the swarm's state-lost marker to `loss` (JSON), or clear it ("")."""
        await self._run(housekeeping.StateLost(marker=keys.state_lost(self.swarm), loss=loss))

    async def set_paused(self, paused: bool) -> housekeeping.PauseSet:
        """Set or clear the swarm's recovery-paused key."""
        reply = await self._run(
            housekeeping.Pause(paused=keys.paused(self.swarm), pause=paused, at=self.now())
        )
        return reply.status
