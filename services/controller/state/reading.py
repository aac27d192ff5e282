"""Reads of recovery state: records one by one or many in a round trip, the reads a listing
pass makes first, the swarm index and the counters /metrics shows.

Reads need no lease: every replica serves them. Nothing here writes. The status read model
built from these reads (tasks, seats and handoff cards) is in `swarm_status`.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from services.common import redis_link, tokens
from services.controller.state import codec, housekeeping, keys, records, scripting

R = TypeVar("R", bound=codec.Hashed)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def _hash(client: redis_link.Client, key: str) -> dict[str, str] | None:
    raw = await client.hgetall(key)
    return records.text_hash(raw) if raw else None


def _record(cls: type[R], raw: Any) -> R | None:
    """A record from an HGETALL reply (bytes or text), or None when the hash is absent."""
    return cls.from_hash(records.text_hash(raw)) if raw else None


async def _records(client: redis_link.Client, cls: type[R], record_keys: Iterable[str]) -> list[R]:
    """The records at `record_keys` that exist, in order, read in one round trip."""
    pipe = client.pipeline(transaction=False)
    for key in record_keys:
        pipe.hgetall(key)
    return [found for raw in await pipe.execute() if (found := _record(cls, raw)) is not None]


async def seat(client: redis_link.Client, swarm: str, name: str) -> records.Seat | None:
    return _record(records.Seat, await client.hgetall(keys.seat(swarm, name)))


async def seat_names(client: redis_link.Client, swarm: str) -> list[str]:
    """The swarm's seats in document order."""
    names: list[Any] = await client.zrange(keys.seats(swarm), 0, -1)
    return [_text(n) for n in names]


async def seats(
    client: redis_link.Client, swarm: str, names: Iterable[str] | None = None
) -> list[records.Seat]:
    """The named seats (default: every seat, in document order), read in one round trip."""
    wanted = list(names) if names is not None else await seat_names(client, swarm)
    return await _records(client, records.Seat, (keys.seat(swarm, name) for name in wanted))


async def attention(client: redis_link.Client, swarm: str) -> list[str]:
    """The seats with unfinished work for the pass (see `keys.attention`)."""
    members: set[Any] = await client.smembers(keys.attention(swarm))
    return sorted(_text(m) for m in members)


async def expected(client: redis_link.Client, swarm: str) -> dict[str, int]:
    """Execution id -> consecutive passes the runtime's list did not show it, for every attempt
    the list should show (see `keys.expected`)."""
    return _passes(await _hash(client, keys.expected(swarm)) or {})


def _passes(raw: Mapping[str, str]) -> dict[str, int]:
    return {eid: int(passes or "0") for eid, passes in raw.items()}


@dataclasses.dataclass(frozen=True)
class PassReads:
    """What a listing pass reads before it lists the runtime (see `before_listing`)."""

    expected: dict[str, int]
    """Execution id -> passes the list did not show it (see `keys.expected`)."""
    attention: list[str]
    """The seats with unfinished work (see `keys.attention`), sorted."""
    seats: dict[str, records.Seat]
    """The attention seats read that have work left (not those skipped)."""
    awaiting: set[str]
    """The attention seats read that only await their replacement's report: replacing, the
    fenced attempt's every release recorded and its decision accepted, the replacement (the
    seat's current attempt) running and launched. The pass has nothing to do for them."""
    requests: list[tuple[str, records.Request]]
    """The recorded decision requests (see `requests`), for the pass's last step."""
    known: bool
    """Whether the swarm's config exists: False when Redis lost the swarm's records."""


async def before_listing(
    scripts: scripting.Scripts, swarm: str, skip: Iterable[str] = ()
) -> PassReads:
    """What a listing pass reads before it lists the runtime, in one read-only script: the
    expected attempts, the attention set, each attention seat but those in `skip` (the seat
    queue holds them: their worker reads them) sorted into those with work left and those
    only awaiting their replacement's report, and the recorded requests. At a hundred swarms a
    pass of each every few seconds, a storm's worth of seats in each: one round trip instead of
    a pipeline per step, and the seats with nothing to do are not sent back."""
    raw_expected, members, awaiting, raw_seats, raw_requests, known = await scripts.read(
        housekeeping.PassReads(
            expected=keys.expected(swarm),
            attention=keys.attention(swarm),
            requests=keys.requests(swarm),
            config=keys.config(swarm),
            seat_prefix=keys.seat(swarm, ""),
            fence_prefix=keys.fence(swarm, ""),
            decision_prefix=keys.decision(swarm, ""),
            execution_prefix=keys.execution(swarm, ""),
            skip=sorted(skip),
            release_fields=[f"release:{kind.value}" for kind in records.ReleaseKind],
        )
    )
    seats: dict[str, records.Seat] = {}
    for flat in raw_seats:
        seat = records.Seat.from_hash(_flat_hash(flat))
        seats[seat.seat] = seat
    return PassReads(
        expected=_passes(_flat_hash(raw_expected)),
        attention=sorted(_text(m) for m in members),
        seats=seats,
        awaiting={_text(n) for n in awaiting},
        requests=_requests(_flat_hash(raw_requests)),
        known=bool(known),
    )


def _flat_hash(flat: list[Any]) -> dict[str, str]:
    """An HGETALL reply a script returned (a flat list of fields and values) as a text hash."""
    return {_text(flat[i]): _text(flat[i + 1]) for i in range(0, len(flat), 2)}


async def execution(client: redis_link.Client, swarm: str, eid: str) -> records.Execution | None:
    return _record(records.Execution, await client.hgetall(keys.execution(swarm, eid)))


async def executions(
    client: redis_link.Client, swarm: str, eids: Iterable[str]
) -> list[records.Execution]:
    """The named attempts that exist, read in one round trip."""
    return await _records(client, records.Execution, (keys.execution(swarm, e) for e in eids))


@dataclasses.dataclass(frozen=True)
class FencedReads:
    """What deciding on and replacing a fenced attempt reads (see `fenced_attempt`)."""

    fence: records.Fence | None
    decision: records.Decision | None
    config: records.SwarmConfig | None
    execution: records.Execution | None
    paused: bool


async def fenced_attempt(client: redis_link.Client, swarm: str, eid: str) -> FencedReads:
    """The fenced attempt's fence, decision and record, the swarm's config and pause switch:
    one pipeline, one round trip."""
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.fence(swarm, eid))
    pipe.hgetall(keys.decision(swarm, eid))
    pipe.hgetall(keys.config(swarm))
    pipe.hgetall(keys.execution(swarm, eid))
    pipe.exists(keys.paused(swarm))
    raw_fence, raw_decision, raw_config, raw_execution, paused_flag = await pipe.execute()
    return FencedReads(
        fence=_record(records.Fence, raw_fence),
        decision=_record(records.Decision, raw_decision),
        config=_record(records.SwarmConfig, raw_config),
        execution=_record(records.Execution, raw_execution),
        paused=bool(paused_flag),
    )


async def seat_and_execution(
    client: redis_link.Client, swarm: str, name: str, eid: str
) -> tuple[records.Seat | None, records.Execution | None]:
    """A seat and one attempt (the one expected to be its current), in one round trip."""
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.seat(swarm, name))
    pipe.hgetall(keys.execution(swarm, eid))
    raw_seat, raw_execution = await pipe.execute()
    return _record(records.Seat, raw_seat), _record(records.Execution, raw_execution)


async def fence(client: redis_link.Client, swarm: str, eid: str) -> records.Fence | None:
    return _record(records.Fence, await client.hgetall(keys.fence(swarm, eid)))


async def decision(client: redis_link.Client, swarm: str, eid: str) -> records.Decision | None:
    return _record(records.Decision, await client.hgetall(keys.decision(swarm, eid)))


async def outcome(client: redis_link.Client, swarm: str, eid: str) -> records.Outcome | None:
    return _record(records.Outcome, await client.hgetall(keys.outcome(swarm, eid)))


async def refusal(client: redis_link.Client, swarm: str, eid: str) -> str | None:
    """The last restore refusal reason a replacement reported."""
    h = await _hash(client, keys.refusal(swarm, eid))
    return h.get("reason") if h else None


async def task(client: redis_link.Client, swarm: str, task_id: str) -> records.Task | None:
    return _record(records.Task, await client.hgetall(keys.task(swarm, task_id)))


async def config(client: redis_link.Client, swarm: str) -> records.SwarmConfig | None:
    return _record(records.SwarmConfig, await client.hgetall(keys.config(swarm)))


async def masters(client: redis_link.Client, swarm: str) -> dict[str, str]:
    """Master agent name -> SHA-256 of its credential."""
    return await _hash(client, keys.masters(swarm)) or {}


async def accounts(client: redis_link.Client, swarm: str) -> dict[str, int]:
    return {k: int(v) for k, v in (await _hash(client, keys.accounts(swarm)) or {}).items()}


async def slots(client: redis_link.Client, swarm: str) -> dict[str, str]:
    """Execution id -> the provider account whose slot it holds."""
    return await _hash(client, keys.slots(swarm)) or {}


async def paused(client: redis_link.Client, swarm: str) -> bool:
    return bool(await client.exists(keys.paused(swarm)))


async def epoch(client: redis_link.Client, swarm: str) -> int:
    value = await client.get(keys.epoch(swarm))
    return int(value) if value is not None else 0


async def requests(client: redis_link.Client, swarm: str) -> list[tuple[str, records.Request]]:
    """Recorded requests as (field, request), oldest first."""
    return _requests(await _hash(client, keys.requests(swarm)) or {})


def _requests(raw: Mapping[str, str]) -> list[tuple[str, records.Request]]:
    found = [(f, records.Request.from_json(json.loads(v))) for f, v in raw.items()]
    return sorted(found, key=lambda item: (item[1].requested_at, item[0]))


async def restore_outcomes_by_type(client: redis_link.Client, swarm: str) -> dict[str, int]:
    """Recovery.restore_outcomes_by_type: verified outcomes as native, reconstructed, fresh."""
    return _outcome_counts(await _hash(client, keys.outcomes_by_type(swarm)) or {})


OUTCOME_KINDS = ("native", "reconstructed", "fresh")
"""The continuity types verified outcomes are counted by."""


def _outcome_counts(raw: Mapping[str, str]) -> dict[str, int]:
    return {kind: int(raw.get(kind, "0")) for kind in OUTCOME_KINDS}


async def outcomes_and_pauses(
    client: redis_link.Client, swarms: Sequence[str]
) -> dict[str, tuple[dict[str, int], bool]]:
    """Each swarm's verified outcomes by type (`restore_outcomes_by_type`) and whether its
    recovery is paused, read for every swarm in one pipeline (what /metrics shows)."""
    pipe = client.pipeline(transaction=False)
    for swarm in swarms:
        pipe.hgetall(keys.outcomes_by_type(swarm))
        pipe.exists(keys.paused(swarm))
    found = await pipe.execute() if swarms else []
    out: dict[str, tuple[dict[str, int], bool]] = {}
    for i, swarm in enumerate(swarms):
        raw = records.text_hash(found[2 * i]) if found[2 * i] else {}
        out[swarm] = (_outcome_counts(raw), bool(found[2 * i + 1]))
    return out


async def swarm_exists(client: redis_link.Client, swarm: str) -> bool:
    """Whether `swarm` is in the swarm index (applied, and not lost with Redis's data)."""
    return bool(await client.sismember(keys.SWARMS, swarm))


async def swarm_names(client: redis_link.Client) -> list[str]:
    return sorted(_text(n) for n in await client.smembers(keys.SWARMS))


async def master_for_token(
    client: redis_link.Client, swarm: str, token: str | None
) -> records.Master | None:
    """The registered master of `swarm` whose credential `token` is, or None.

    The agent name comes from the registration the credential is bound to, never from the
    caller; comparison is constant time.
    """
    if not token:
        return None
    presented = tokens.hash_secret(token)
    for agent, stored in (await masters(client, swarm)).items():
        if hmac.compare_digest(stored.encode(), presented.encode()):
            return records.Master(swarm, agent, presented)
    return None
