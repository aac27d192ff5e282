"""Typed calls of the transition scripts: the only code that writes recovery state.

Each method is one Lua script run under the lease (see `scripting`), declared in `transitions`:
it names every key it touches, passes the record fields the pure code built, and returns the
script's typed answer: its status (a member of the script's status enum) when that is all the
script answers, else a result with that `status` and the records the script sent back, decoded.
A lost lease raises `scripting.LeaseLost` and nothing was written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from services.controller.state import bookkeeping, guarded, keys, records, reports, transitions

Clock = guarded.Clock
rfc3339 = guarded.rfc3339
WORKER_CREDENTIAL_TTL_S = guarded.WORKER_CREDENTIAL_TTL_S
REVOCATION_MARGIN_S = guarded.REVOCATION_MARGIN_S
GRANT_REVOCATION_S = guarded.GRANT_REVOCATION_S


@dataclasses.dataclass(frozen=True)
class Applied:
    """The answer of `Writer.apply_swarm`: the execution ids admitted and the seats updated."""

    status: transitions.Applied
    admitted: list[str]
    updated: list[str]


@dataclasses.dataclass(frozen=True)
class Fenced:
    """The answer of `Writer.fence_returning`: the status and, when fenced now, the fence as
    written, the attempt as fenced, the swarm's config and whether the swarm is paused."""

    status: transitions.FenceStatus
    fence: records.Fence | None = None
    execution: records.Execution | None = None
    config: records.SwarmConfig | None = None
    paused: bool = False
    expected_generation: int | None = None


@dataclasses.dataclass(frozen=True)
class Accepted:
    """The answer of `Writer.accept`: when accepted, the replacement and the seat as
    written; accepted or repeated, the decision as stored."""

    status: transitions.AcceptStatus
    replacement: records.Execution | None = None
    seat: records.Seat | None = None
    decision: records.Decision | None = None


@dataclasses.dataclass(frozen=True)
class Restored:
    """The answer of `Writer.restore`: when `diverged`, the seat's generation."""

    status: transitions.RestoreStatus
    expected_generation: int | None = None


class Writer(reports.Reports, bookkeeping.Bookkeeping):
    """Writes one swarm's state, always under its lease (see `guarded.Guarded`): the swarm,
    fences, releases and decisions here; what attempts report (`reports`) and the seats'
    bookkeeping (`bookkeeping`) from its bases."""

    async def apply_swarm(
        self,
        config: Mapping[str, str],
        masters: Mapping[str, str],
        accounts: Mapping[str, int],
        seats: Sequence[Mapping[str, Any]],
        task_keys: Sequence[str],
    ) -> Applied:
        """Declare or update the swarm: the execution ids it admitted and the seats it
        updated."""
        s = self.swarm
        seat_keys: list[str] = []
        for seat, task_key in zip(seats, task_keys, strict=True):
            seat_keys += [
                keys.seat(s, seat["seat"]),
                task_key,
                keys.execution(s, seat["execution_id"]),
            ]
        reply = await self._run(
            transitions.ApplySwarm(
                config=keys.config(s),
                masters=keys.masters(s),
                accounts=keys.accounts(s),
                seats=keys.seats(s),
                slots=keys.slots(s),
                attention=keys.attention(s),
                slots_used=keys.slots_used(s),
                seat_keys=tuple(seat_keys),
                config_fields=dict(config),
                master_hashes=dict(masters),
                account_slots={k: str(v) for k, v in accounts.items()},
                seat_list=list(seats),
            )
        )
        return Applied(reply.status, list(reply.fields["admitted"]), list(reply.fields["updated"]))

    async def fence(
        self, seat: str, execution: str, generation: int, reason: str
    ) -> transitions.FenceStatus:
        """Fence the seat's current attempt: `fenced`, `exists`, `not_current`, or
        `restore_refused` (a replacement holding a reported restore refusal is left alone)."""
        return (await self.fence_returning(seat, execution, generation, reason)).status

    async def fence_returning(
        self,
        seat: str,
        execution: str,
        generation: int,
        reason: str,
        *,
        authority: bool = False,
    ) -> Fenced:
        """`fence`, with the fence record it wrote and what deciding on it reads next (all
        None unless `fenced`; `expected_generation`, the seat's, when `not_current`). With
        `authority`, the attempt's authority releases (as `release` does them) are done and
        recorded in the same write when it fences. Nothing needs to be read first: the script
        checks the seat and reads the attempt's record itself."""
        s = self.swarm
        now = self.clock()
        kinds = records.AUTHORITY_RELEASES if authority else ()
        reply = await self._run(
            transitions.Fence(
                seat=keys.seat(s, seat),
                execution=keys.execution(s, execution),
                fence=keys.fence(s, execution),
                events=keys.events(s),
                attention=keys.attention(s),
                refusal=keys.refusal(s, execution),
                expected=keys.expected(s),
                slots=keys.slots(s),
                slots_used=keys.slots_used(s),
                config=keys.config(s),
                paused=keys.paused(s),
                execution_id=execution,
                generation=generation,
                reason=reason,
                at=rfc3339(now),
                swarm=s,
                task_prefix=keys.task(s, ""),
                kinds=[k.value for k in kinds],
                **self._revocations(now),
            )
        )
        fields = reply.fields
        if reply.status is not transitions.FenceStatus.FENCED:
            return Fenced(reply.status, expected_generation=fields.get("expected_generation"))
        config = fields.get("config")
        return Fenced(
            reply.status,
            records.Fence.from_hash(fields["fence"]),
            records.Execution.from_hash(fields["attempt"]),
            # cjson writes an empty table as {}: no config.
            records.SwarmConfig.from_hash(config) if config else None,
            bool(fields.get("paused")),
        )

    async def release(
        self,
        execution: str,
        kinds: Sequence[records.ReleaseKind],
        *,
        at: str | None = None,
    ) -> transitions.ReleaseStatus:
        """Releases done and recorded in the fence in one script: `released` (at least one
        kind was not recorded yet), `already`, `no_fence`, or `execution_missing` (an
        authority release without the attempt's record).

        Args:
            execution: The fenced attempt.
            kinds: What to release; what each revokes (the worker credential, the store
                grants) is read from the attempt's record by the script.
            at: The release time to record (now when None).
        """
        s = self.swarm
        now = self.clock()
        reply = await self._run(
            transitions.Release(
                fence=keys.fence(s, execution),
                slots=keys.slots(s),
                slots_used=keys.slots_used(s),
                execution=keys.execution(s, execution),
                kinds=[k.value for k in kinds],
                at=at or rfc3339(now),
                execution_id=execution,
                **self._revocations(now),
            )
        )
        return reply.status

    def _offering(self, fence: records.Fence, offer: records.Offer | None) -> dict[str, Any]:
        """What `pend` and `reoffer` both pass (`transitions.Offering`)."""
        s, e = self.swarm, fence.execution_id
        return {
            "fence": keys.fence(s, e),
            "decision": keys.decision(s, e),
            "seat": keys.seat(s, fence.seat),
            "events": keys.events(s),
            "execution_id": e,
            "offer": offer.to_json() if offer else None,
        }

    async def pend(
        self,
        fence: records.Fence,
        offer: records.Offer | None,
        detail: str,
        compatibility_key: str,
    ) -> transitions.PendStatus:
        """Record that the fenced attempt awaits a decision: `pending`, `exists`, `no_fence`.
        The offer is recorded with the compatibility key it was worked out under."""
        call = transitions.Pend(
            **self._offering(fence, offer),
            at=self.now(),
            swarm=self.swarm,
            detail=detail,
            offer_key=compatibility_key,
        )
        return (await self._run(call)).status

    async def reoffer(
        self,
        fence: records.Fence,
        offer: records.Offer | None,
        compatibility_key: str,
        detail: str,
    ) -> transitions.ReofferStatus:
        """Replace a pending decision's offer with one worked out under `compatibility_key`:
        `reoffered`, `current` (already recorded under that key) or `not_pending`."""
        call = transitions.Reoffer(
            **self._offering(fence, offer),
            offer_key=compatibility_key,
            at=self.now(),
            swarm=self.swarm,
            detail=detail,
        )
        return (await self._run(call)).status

    async def accept(
        self,
        fence: records.Fence,
        *,
        choice: records.Choice,
        decision: Mapping[str, str],
        replacement: records.Execution,
        task_recovery: Mapping[str, Any],
        automatic: bool,
        request_field: str | None,
        detail: str,
        offer: records.Offer | None,
    ) -> Accepted:
        """Accept a decision and admit its replacement in one script.

        Returns:
            The status (`accepted`, `repeated`, `conflict`, `releasing`, `paused`,
            `not_current` or `no_fence`) and, when accepted, the replacement and the seat as
            written; accepted or repeated, the decision as stored.
        """
        return await self._accept(
            fence,
            choice=choice,
            replacement_id=replacement.execution_id,
            decision=dict(decision),
            replacement=replacement.to_hash(),
            task_recovery=dict(task_recovery),
            automatic=automatic,
            request_field=request_field,
            detail=detail,
            offer=offer.to_json() if offer else None,
        )

    async def accepted_before(self, fence: records.Fence, choice: records.Choice) -> Accepted:
        """Ask the accept script, without a directive, whether `choice` repeats the accepted
        decision of the fenced attempt (`repeated`, with it) or conflicts with it (`conflict`);
        otherwise `unplanned` (or what else stops an acceptance, such as `no_fence`). Writes
        nothing."""
        replacement_id = keys.execution_id(self.swarm, fence.seat, fence.generation + 1)
        return await self._accept(fence, choice=choice, replacement_id=replacement_id)

    async def _accept(
        self,
        fence: records.Fence,
        *,
        choice: records.Choice,
        replacement_id: str,
        decision: Mapping[str, str] | None = None,
        replacement: Mapping[str, str] | None = None,
        task_recovery: Mapping[str, Any] | None = None,
        automatic: bool = False,
        request_field: str | None = None,
        detail: str = "",
        offer: Mapping[str, Any] | None = None,
    ) -> Accepted:
        """The accept script; without a `replacement`, unplanned (see `accepted_before`)."""
        s, e = self.swarm, fence.execution_id
        reply = await self._run(
            transitions.Accept(
                fence=keys.fence(s, e),
                decision=keys.decision(s, e),
                execution=keys.execution(s, e),
                seat=keys.seat(s, fence.seat),
                task=keys.task(s, fence.task_id),
                replacement=keys.execution(s, replacement_id),
                slots=keys.slots(s),
                accounts=keys.accounts(s),
                paused=keys.paused(s),
                requests=keys.requests(s),
                events=keys.events(s),
                slots_used=keys.slots_used(s),
                execution_id=e,
                choice=choice.value,
                decision_fields=decision or {},
                replacement_fields=replacement or {},
                task_recovery=task_recovery or {},
                automatic=automatic,
                request_field=request_field,
                at=self.now(),
                swarm=s,
                detail=detail,
                offer=offer,
                unplanned=replacement is None,
            )
        )
        stored = reply.fields.get("decision")
        decided = records.Decision.from_hash(stored) if stored else None
        if reply.status is not transitions.AcceptStatus.ACCEPTED:
            return Accepted(reply.status, decision=decided)
        return Accepted(
            reply.status,
            records.Execution.from_hash(reply.fields["replacement"]),
            records.Seat.from_hash(reply.fields["seat"]),
            decided,
        )

    async def restore(
        self,
        replacement: records.Execution,
        *,
        fence: Mapping[str, str],
        decision: Mapping[str, str],
        task_recovery: Mapping[str, Any],
        detail: str,
    ) -> Restored:
        """Write back a decision Redis lost, as the replacement's Pod witnesses it: the
        replaced attempt's fence (its authority released in the same write), the decision
        accepted, the replacement's record and the seat at its generation.

        Returns:
            The status (`restored`; `known` when the seat is at or past the generation, so a
            repeat writes nothing; `conflict` when another decision is accepted; `diverged`
            when the seat's current attempt is not the one replaced; `no_seat`) and, when
            `diverged`, the seat's generation.
        """
        s, replaced = self.swarm, replacement.restores_from_execution
        assert replaced is not None
        now = self.clock()
        reply = await self._run(
            transitions.Restore(
                seat=keys.seat(s, replacement.seat),
                replaced=keys.execution(s, replaced),
                fence=keys.fence(s, replaced),
                decision=keys.decision(s, replaced),
                replacement=keys.execution(s, replacement.execution_id),
                task=keys.task(s, replacement.task_id),
                attention=keys.attention(s),
                expected=keys.expected(s),
                slots=keys.slots(s),
                slots_used=keys.slots_used(s),
                events=keys.events(s),
                replaced_id=replaced,
                replaced_generation=replacement.restores_from_generation,
                replacement_id=replacement.execution_id,
                generation=replacement.generation,
                fence_fields=dict(fence),
                decision_fields=dict(decision),
                replacement_fields=replacement.to_hash(),
                task_recovery=dict(task_recovery),
                at=rfc3339(now),
                swarm=s,
                detail=detail,
                kinds=[k.value for k in records.AUTHORITY_RELEASES],
                **self._revocations(now),
            )
        )
        return Restored(reply.status, reply.fields.get("expected_generation"))
