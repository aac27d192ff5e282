"""Typed calls of the transition scripts: the only code that writes recovery state.

Each method is one Lua script run under the lease (see `scripting`): it names every key it
touches, passes the record fields the pure code built, and returns the script's status word.
A lost lease raises `scripting.LeaseLost` and nothing was written.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from services.common import tokens
from services.controller import telemetry
from services.controller.state import keys, leasing, records

Clock = Callable[[], float]

WORKER_CREDENTIAL_TTL_S = 30 * 24 * 3600
"""How long a worker credential lives; it is revoked as soon as its attempt is fenced."""

REVOCATION_MARGIN_S = 120
"""Keep a revocation a little past the last moment its token could still pass a check."""

GRANT_REVOCATION_S = tokens.DEFAULT_GRANT_TTL_S + tokens.LEEWAY_S + REVOCATION_MARGIN_S
"""How long a store grant's revocation is kept: grants are minted on demand (never after the
fence), each for at most the default grant lifetime, so that long covers every copy."""


def rfc3339(at: float) -> str:
    """A UTC timestamp as RFC 3339 with a `Z`."""
    stamp = datetime.datetime.fromtimestamp(at, datetime.UTC).isoformat(timespec="seconds")
    return stamp.replace("+00:00", "Z")


@dataclasses.dataclass(frozen=True)
class Accepted:
    """The answer of `Writer.accept`."""

    status: str
    replacement: records.Execution | None = None
    seat: records.Seat | None = None


@dataclasses.dataclass(frozen=True)
class Fenced:
    """The answer of `Writer.fence_returning`: the status and, when fenced now, the fence as
    written, the attempt as fenced, the swarm's config and whether the swarm is paused."""

    status: str
    fence: records.Fence | None = None
    execution: records.Execution | None = None
    config: records.SwarmConfig | None = None
    paused: bool = False
    expected_generation: int | None = None


class Writer:
    """Writes one swarm's state, always under its lease.

    Args:
        lease: The swarm's lease (its holder and epoch guard every script).
        clock: Seconds since the epoch (tests pass a fixed clock).
    """

    def __init__(self, lease: leasing.Lease, *, clock: Clock = time.time) -> None:
        self.lease = lease
        self.swarm = lease.swarm
        self.clock = clock

    def now(self) -> str:
        return rfc3339(self.clock())

    async def _run(self, name: str, keys_: Sequence[str], args: Sequence[str | int]) -> Any:
        reply = await self.lease.scripts.run(
            name,
            holder=self.lease.holder,
            epoch=self.lease.epoch,
            keys=[*self.lease.keys, *keys_],
            args=args,
        )
        telemetry.log_events(reply.get("events", []))
        return reply

    async def apply_swarm(
        self,
        config: Mapping[str, str],
        masters: Mapping[str, str],
        accounts: Mapping[str, int],
        seats: Sequence[Mapping[str, Any]],
        task_keys: Sequence[str],
    ) -> tuple[list[str], list[str]]:
        """Declare or update the swarm; returns (admitted execution ids, updated seats)."""
        s = self.swarm
        seat_keys: list[str] = []
        for seat, task_key in zip(seats, task_keys, strict=True):
            seat_keys += [
                keys.seat(s, seat["seat"]),
                task_key,
                keys.execution(s, seat["execution_id"]),
            ]
        reply = await self._run(
            "apply_swarm",
            [
                keys.config(s),
                keys.masters(s),
                keys.accounts(s),
                keys.seats(s),
                keys.slots(s),
                keys.attention(s),
                keys.slots_used(s),
                *seat_keys,
            ],
            [
                json.dumps(dict(config)),
                json.dumps(dict(masters)),
                json.dumps({k: str(v) for k, v in accounts.items()}),
                json.dumps(list(seats)),
            ],
        )
        return list(reply["admitted"]), list(reply["updated"])

    async def fence(self, seat: str, execution: str, generation: int, reason: str) -> str:
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
        reply = await self._run(
            "fence",
            [
                keys.seat(s, seat),
                keys.execution(s, execution),
                keys.fence(s, execution),
                keys.events(s),
                keys.attention(s),
                keys.refusal(s, execution),
                keys.expected(s),
                keys.slots(s),
                keys.slots_used(s),
                keys.config(s),
                keys.paused(s),
            ],
            [
                execution,
                generation,
                reason,
                rfc3339(now),
                s,
                keys.task(s, ""),
                json.dumps([k.value for k in records.AUTHORITY_RELEASES] if authority else []),
                *self._revoke_args(now),
            ],
        )
        status = str(reply["status"])
        if status != "fenced":
            return Fenced(status, expected_generation=reply.get("expected_generation"))
        config = reply.get("config")
        return Fenced(
            status,
            records.Fence.from_hash(reply["fence"]),
            records.Execution.from_hash(reply["attempt"]),
            # cjson writes an empty table as {}: no config.
            records.SwarmConfig.from_hash(config) if config else None,
            bool(reply.get("paused")),
        )

    def _revoke_args(self, now: float) -> list[str | int]:
        """What the scripts' `revocations` takes besides the attempt's record: the revocation
        key prefix, now, how long past its issue a worker credential's revocation is kept
        (until it could no longer pass a check), how long a store grant's is."""
        return [
            keys.revoked(self.swarm, ""),
            int(now),
            WORKER_CREDENTIAL_TTL_S + REVOCATION_MARGIN_S,
            GRANT_REVOCATION_S,
        ]

    async def release(
        self,
        execution: str,
        kinds: Sequence[records.ReleaseKind],
        *,
        at: str | None = None,
    ) -> str:
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
            "release",
            [
                keys.fence(s, execution),
                keys.slots(s),
                keys.slots_used(s),
                keys.execution(s, execution),
            ],
            [
                json.dumps([k.value for k in kinds]),
                at or rfc3339(now),
                execution,
                *self._revoke_args(now),
            ],
        )
        return str(reply["status"])

    async def pend(
        self,
        fence: records.Fence,
        offer: records.Offer | None,
        detail: str,
        compatibility_key: str,
    ) -> str:
        """Record that the fenced attempt awaits a decision: `pending`, `exists`, `no_fence`.
        The offer is recorded with the compatibility key it was worked out under."""
        s = self.swarm
        reply = await self._run(
            "pend",
            [
                keys.fence(s, fence.execution_id),
                keys.decision(s, fence.execution_id),
                keys.seat(s, fence.seat),
                keys.events(s),
            ],
            [
                fence.execution_id,
                json.dumps(offer.to_json()) if offer else "",
                self.now(),
                s,
                detail,
                compatibility_key,
            ],
        )
        return str(reply["status"])

    async def reoffer(
        self,
        fence: records.Fence,
        offer: records.Offer | None,
        compatibility_key: str,
        detail: str,
    ) -> str:
        """Replace a pending decision's offer with one worked out under `compatibility_key`:
        `reoffered`, `current` (already recorded under that key) or `not_pending`."""
        s = self.swarm
        reply = await self._run(
            "reoffer",
            [
                keys.fence(s, fence.execution_id),
                keys.decision(s, fence.execution_id),
                keys.seat(s, fence.seat),
                keys.events(s),
            ],
            [
                fence.execution_id,
                json.dumps(offer.to_json()) if offer else "",
                compatibility_key,
                self.now(),
                s,
                detail,
            ],
        )
        return str(reply["status"])

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
            written.
        """
        s, e = self.swarm, fence.execution_id
        reply = await self._run(
            "accept",
            [
                keys.fence(s, e),
                keys.decision(s, e),
                keys.execution(s, e),
                keys.seat(s, fence.seat),
                keys.task(s, fence.task_id),
                keys.execution(s, replacement.execution_id),
                keys.slots(s),
                keys.accounts(s),
                keys.paused(s),
                keys.requests(s),
                keys.events(s),
                keys.slots_used(s),
            ],
            [
                e,
                choice.value,
                json.dumps(dict(decision)),
                json.dumps(replacement.to_hash()),
                json.dumps(dict(task_recovery)),
                "1" if automatic else "0",
                request_field or "",
                self.now(),
                s,
                detail,
                json.dumps(offer.to_json()) if offer else "",
            ],
        )
        status = str(reply["status"])
        if status != "accepted":
            return Accepted(status)
        return Accepted(
            status,
            records.Execution.from_hash(reply["replacement"]),
            records.Seat.from_hash(reply["seat"]),
        )

    async def restore(
        self,
        replacement: records.Execution,
        *,
        fence: Mapping[str, str],
        decision: Mapping[str, str],
        task_recovery: Mapping[str, Any],
        detail: str,
    ) -> tuple[str, int | None]:
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
            "restore",
            [
                keys.seat(s, replacement.seat),
                keys.execution(s, replaced),
                keys.fence(s, replaced),
                keys.decision(s, replaced),
                keys.execution(s, replacement.execution_id),
                keys.task(s, replacement.task_id),
                keys.attention(s),
                keys.expected(s),
                keys.slots(s),
                keys.slots_used(s),
                keys.events(s),
            ],
            [
                replaced,
                replacement.restores_from_generation,
                replacement.execution_id,
                replacement.generation,
                json.dumps(dict(fence)),
                json.dumps(dict(decision)),
                json.dumps(replacement.to_hash()),
                json.dumps(dict(task_recovery)),
                rfc3339(now),
                s,
                detail,
                json.dumps([k.value for k in records.AUTHORITY_RELEASES]),
                *self._revoke_args(now),
            ],
        )
        return str(reply["status"]), reply.get("expected_generation")

    async def launched(
        self,
        execution: records.Execution,
        seat: records.Seat,
        *,
        removed: str | None = None,
        at: str | None = None,
    ) -> str:
        """Record that the attempt's Pod was launched: `launched`, `already` or `missing`.
        `removed` names a fenced attempt whose Pod was removed since: its fence records that
        release in the same write (recorded at `at`, now when None)."""
        s = self.swarm
        fenced = seat.fenced_execution_id
        reply = await self._run(
            "launched",
            [
                keys.execution(s, execution.execution_id),
                keys.seat(s, seat.seat),
                keys.attention(s),
                keys.fence(s, fenced or execution.execution_id),
                keys.expected(s),
                keys.fence(s, removed or execution.execution_id),
            ],
            [at or self.now(), seat.seat, "1" if fenced else "0", "1" if removed else "0"],
        )
        return str(reply["status"])

    async def capture(
        self,
        execution: records.Execution,
        credential_id: str,
        session_id: str | None,
        archive_watermark: int | None,
        checkpoint_id: str | None,
        final: bool = False,
    ) -> str:
        """Store a running attempt's capture report (`final`: the sidecar's last, taken once
        the worker stopped): `captured` or `forbidden`."""
        s = self.swarm
        reply = await self._run(
            "capture",
            [keys.seat(s, execution.seat), keys.execution(s, execution.execution_id)],
            [
                execution.execution_id,
                credential_id,
                execution.generation,
                session_id or "",
                "" if archive_watermark is None else archive_watermark,
                checkpoint_id or "",
                self.now(),
                "1" if final else "0",
            ],
        )
        return str(reply["status"])

    async def outcome(
        self,
        execution: records.Execution,
        task_id: str,
        credential_id: str,
        outcome: records.Outcome,
        task_recovery: Mapping[str, Any],
        detail: str,
    ) -> dict[str, Any]:
        """Store a verified outcome: status `stored`, `repeated`, `conflict`, `mismatch`
        (with `field`), `forbidden` or `not_replacement`."""
        s = self.swarm
        reply: dict[str, Any] = await self._run(
            "outcome",
            [
                keys.seat(s, execution.seat),
                keys.execution(s, execution.execution_id),
                keys.outcome(s, execution.execution_id),
                keys.task(s, task_id),
                keys.outcomes_by_type(s),
                keys.events(s),
                keys.refusal(s, execution.execution_id),
                keys.attention(s),
                keys.fence(s, execution.restores_from_execution or execution.execution_id),
            ],
            [
                execution.execution_id,
                credential_id,
                execution.generation,
                json.dumps(outcome.to_hash()),
                json.dumps(dict(task_recovery)),
                outcome.reported_at,
                s,
                detail,
            ],
        )
        return reply

    async def refusal(
        self, execution: records.Execution, credential_id: str, reason: str, detail: str
    ) -> str:
        """Keep a reported restore refusal, which holds the attempt: `stored`, `forbidden`,
        `not_replacement` or `conflict` (a verified outcome is stored already)."""
        s = self.swarm
        reply = await self._run(
            "refusal",
            [
                keys.seat(s, execution.seat),
                keys.execution(s, execution.execution_id),
                keys.refusal(s, execution.execution_id),
                keys.events(s),
                keys.outcome(s, execution.execution_id),
            ],
            [
                execution.execution_id,
                credential_id,
                execution.generation,
                reason,
                self.now(),
                s,
                detail,
            ],
        )
        return str(reply["status"])

    async def absent(
        self, seat: records.Seat, execution: str, generation: int, threshold: int
    ) -> dict[str, Any]:
        """Count one more pass whose runtime list did not show an expected attempt.

        Returns:
            The reply: status `counted` (below `threshold`), `evict` (fence it evicted),
            `relaunch` (its restore refusal was cleared and it is recorded as not launched, to
            be launched again), or `stale` (not the seat's launched running attempt any more);
            `passes` is the count.
        """
        s = self.swarm
        reply: dict[str, Any] = await self._run(
            "absent",
            [
                keys.seat(s, seat.seat),
                keys.execution(s, execution),
                keys.refusal(s, execution),
                keys.expected(s),
                keys.attention(s),
                keys.events(s),
            ],
            [execution, generation, threshold, self.now(), s],
        )
        return reply

    async def listed(self, again: Sequence[str], finished: Sequence[str]) -> None:
        """Record what the runtime's list showed of expected attempts: `again` (listed after a
        pass without them) count from zero, `finished` (exited 0) are expected no longer."""
        s = self.swarm
        await self._run(
            "listed",
            [keys.expected(s), *(keys.refusal(s, e) for e in finished)],
            [json.dumps(list(again)), json.dumps(list(finished))],
        )

    async def record_request(self, request: records.Request) -> bool:
        """Record a request for the next pass; False when the same one is already recorded."""
        reply = await self._run(
            "request",
            [keys.requests(self.swarm)],
            [
                keys.request_field(request.execution_id, request.choice.value),
                json.dumps(request.to_json()),
            ],
        )
        return bool(reply["status"] == "recorded")

    async def drop_request(
        self, field: str, *, execution_id: str = "", seat: str = "", detail: str = ""
    ) -> None:
        """Drop a request the pass refused or found already decided; with `execution_id`, in
        the same write a `request` event says why (what a waiting CLI follows)."""
        s = self.swarm
        await self._run(
            "drop_request",
            [keys.requests(s), keys.events(s)],
            [field, execution_id, s, seat, detail, self.now()],
        )

    async def settle(self, seat: records.Seat) -> bool:
        """Take a seat with nothing left to do off the pass's attention set; False when the
        script found it still busy."""
        s = self.swarm
        fenced = seat.fenced_execution_id
        reply = await self._run(
            "settle",
            [
                keys.attention(s),
                keys.seat(s, seat.seat),
                keys.execution(s, seat.current_execution_id),
                keys.fence(s, fenced or seat.current_execution_id),
            ],
            [seat.seat, "1" if fenced else "0"],
        )
        return bool(reply["status"] == "settled")

    async def set_paused(self, paused: bool) -> None:
        """Set or clear the swarm's recovery-paused key."""
        await self._run("pause", [keys.paused(self.swarm)], ["1" if paused else "0", self.now()])
