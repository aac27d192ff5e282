"""Every Lua script, declared once: its keys and arguments by name, and the statuses it answers.

The scripts that move an attempt through its states are here; those that keep the books around
them (the lease, the pass's reads, the attention and expected sets, recorded requests, the pause
switch) are in `housekeeping`. `GUARDED` and `UNGUARDED` list them all.

Each class is one script of `scripts/` (see `scripting`): its `Key` fields are KEYS[3..] and its
`Arg` fields ARGV[3..], in the order written here (the lease's own come first). Each status enum
lists every word its script can answer. The header comment of each script says what each key
and argument is; `tests/unit/controller/test_transitions.py` checks the two agree.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from typing import Any

from services.controller.state import housekeeping, scripting

# The swarm.


class Applied(enum.StrEnum):
    APPLIED = "applied"


@dataclasses.dataclass(frozen=True)
class ApplySwarm(scripting.Call[Applied], script="apply_swarm"):
    """Replies `admitted` (execution ids) and `updated` (seats)."""

    config: scripting.Key
    masters: scripting.Key
    accounts: scripting.Key
    seats: scripting.Key
    slots: scripting.Key
    attention: scripting.Key
    slots_used: scripting.Key
    seat_keys: scripting.Keys
    """For each seat in `seat_list`: its seat key, task key and first execution key."""
    config_fields: scripting.Arg[Mapping[str, str]]
    master_hashes: scripting.Arg[Mapping[str, str]]
    account_slots: scripting.Arg[Mapping[str, str]]
    seat_list: scripting.Arg[Sequence[Mapping[str, Any]]]


# Fence and release.


class FenceStatus(enum.StrEnum):
    FENCED = "fenced"
    EXISTS = "exists"
    NOT_CURRENT = "not_current"
    """Replies `expected_generation`, the seat's."""
    RESTORE_REFUSED = "restore_refused"


@dataclasses.dataclass(frozen=True)
class Fence(scripting.Call[FenceStatus], script="fence"):
    """When fenced, replies the `fence` written, the `attempt` as fenced, the swarm's
    `config` and whether it is `paused`."""

    seat: scripting.Key
    execution: scripting.Key
    fence: scripting.Key
    events: scripting.Key
    attention: scripting.Key
    refusal: scripting.Key
    expected: scripting.Key
    slots: scripting.Key
    slots_used: scripting.Key
    config: scripting.Key
    paused: scripting.Key
    execution_id: scripting.Arg[str]
    generation: scripting.Arg[int]
    reason: scripting.Arg[str]
    at: scripting.Arg[str]
    swarm: scripting.Arg[str]
    task_prefix: scripting.Arg[str]
    kinds: scripting.Arg[Sequence[str]]
    revoke_prefix: scripting.Arg[str]
    now: scripting.Arg[int]
    credential_ttl_s: scripting.Arg[int]
    grant_ttl_s: scripting.Arg[int]


class ReleaseStatus(enum.StrEnum):
    RELEASED = "released"
    ALREADY = "already"
    NO_FENCE = "no_fence"
    EXECUTION_MISSING = "execution_missing"


@dataclasses.dataclass(frozen=True)
class Release(scripting.Call[ReleaseStatus], script="release"):
    fence: scripting.Key
    slots: scripting.Key
    slots_used: scripting.Key
    execution: scripting.Key
    kinds: scripting.Arg[Sequence[str]]
    at: scripting.Arg[str]
    execution_id: scripting.Arg[str]
    revoke_prefix: scripting.Arg[str]
    now: scripting.Arg[int]
    credential_ttl_s: scripting.Arg[int]
    grant_ttl_s: scripting.Arg[int]


# Decide.


@dataclasses.dataclass(frozen=True)
class Offering(scripting.Declared):
    """What recording a pending decision's offer takes (`Pend`, `Reoffer`)."""

    fence: scripting.Key
    decision: scripting.Key
    seat: scripting.Key
    events: scripting.Key
    execution_id: scripting.Arg[str]
    offer: scripting.Arg[Mapping[str, Any] | None]


class PendStatus(enum.StrEnum):
    PENDING = "pending"
    EXISTS = "exists"
    NO_FENCE = "no_fence"


@dataclasses.dataclass(frozen=True)
class Pend(Offering, scripting.Call[PendStatus], script="pend"):
    at: scripting.Arg[str]
    swarm: scripting.Arg[str]
    detail: scripting.Arg[str]
    offer_key: scripting.Arg[str]


class ReofferStatus(enum.StrEnum):
    REOFFERED = "reoffered"
    CURRENT = "current"
    NOT_PENDING = "not_pending"


@dataclasses.dataclass(frozen=True)
class Reoffer(Offering, scripting.Call[ReofferStatus], script="reoffer"):
    offer_key: scripting.Arg[str]
    at: scripting.Arg[str]
    swarm: scripting.Arg[str]
    detail: scripting.Arg[str]


class AcceptStatus(enum.StrEnum):
    ACCEPTED = "accepted"
    """Replies the `replacement` and the `seat` as written."""
    REPEATED = "repeated"
    """Replies the `decision` as stored; a request field is left for the caller to drop."""
    CONFLICT = "conflict"
    UNPLANNED = "unplanned"
    """Asked without a directive (`unplanned`) and neither repeated nor a conflict: nothing
    written."""
    RELEASING = "releasing"
    PAUSED = "paused"
    NOT_CURRENT = "not_current"
    NO_FENCE = "no_fence"


@dataclasses.dataclass(frozen=True)
class Accept(scripting.Call[AcceptStatus], script="accept"):
    fence: scripting.Key
    decision: scripting.Key
    execution: scripting.Key
    seat: scripting.Key
    task: scripting.Key
    replacement: scripting.Key
    slots: scripting.Key
    accounts: scripting.Key
    paused: scripting.Key
    requests: scripting.Key
    events: scripting.Key
    slots_used: scripting.Key
    execution_id: scripting.Arg[str]
    choice: scripting.Arg[str]
    decision_fields: scripting.Arg[Mapping[str, str]]
    replacement_fields: scripting.Arg[Mapping[str, str]]
    task_recovery: scripting.Arg[Mapping[str, Any]]
    automatic: scripting.Arg[bool]
    request_field: scripting.Arg[str | None]
    at: scripting.Arg[str]
    swarm: scripting.Arg[str]
    detail: scripting.Arg[str]
    offer: scripting.Arg[Mapping[str, Any] | None]
    unplanned: scripting.Arg[bool]


class RestoreStatus(enum.StrEnum):
    RESTORED = "restored"
    KNOWN = "known"
    CONFLICT = "conflict"
    DIVERGED = "diverged"
    """Replies `expected_generation`, the seat's."""
    NO_SEAT = "no_seat"


@dataclasses.dataclass(frozen=True)
class Restore(scripting.Call[RestoreStatus], script="restore"):
    seat: scripting.Key
    replaced: scripting.Key
    fence: scripting.Key
    decision: scripting.Key
    replacement: scripting.Key
    task: scripting.Key
    attention: scripting.Key
    expected: scripting.Key
    slots: scripting.Key
    slots_used: scripting.Key
    events: scripting.Key
    replaced_id: scripting.Arg[str]
    replaced_generation: scripting.Arg[int]
    replacement_id: scripting.Arg[str]
    generation: scripting.Arg[int]
    fence_fields: scripting.Arg[Mapping[str, str]]
    decision_fields: scripting.Arg[Mapping[str, str]]
    replacement_fields: scripting.Arg[Mapping[str, str]]
    task_recovery: scripting.Arg[Mapping[str, Any]]
    at: scripting.Arg[str]
    swarm: scripting.Arg[str]
    detail: scripting.Arg[str]
    kinds: scripting.Arg[Sequence[str]]
    revoke_prefix: scripting.Arg[str]
    now: scripting.Arg[int]
    credential_ttl_s: scripting.Arg[int]
    grant_ttl_s: scripting.Arg[int]


# Replace and hold.


class LaunchedStatus(enum.StrEnum):
    LAUNCHED = "launched"
    ALREADY = "already"
    MISSING = "missing"


@dataclasses.dataclass(frozen=True)
class Launched(scripting.Call[LaunchedStatus], script="launched"):
    execution: scripting.Key
    seat: scripting.Key
    attention: scripting.Key
    fence: scripting.Key
    """The seat's latest fence (any key when it has none)."""
    expected: scripting.Key
    removed_fence: scripting.Key
    """The fence of the attempt whose Pod was removed (any key when none was)."""
    at: scripting.Arg[str]
    fenced: scripting.Arg[bool]
    removed: scripting.Arg[bool]


# What a worker reports.


@dataclasses.dataclass(frozen=True)
class Reported(scripting.Declared):
    """What every report of a running attempt takes: its seat and record, and the credential
    and generation it reports with (`Capture`, `Outcome`, `Refusal`)."""

    seat: scripting.Key
    execution: scripting.Key
    execution_id: scripting.Arg[str]
    credential_id: scripting.Arg[str]
    generation: scripting.Arg[int]


class CaptureStatus(enum.StrEnum):
    CAPTURED = "captured"
    FORBIDDEN = "forbidden"


@dataclasses.dataclass(frozen=True)
class Capture(Reported, scripting.Call[CaptureStatus], script="capture"):
    session_id: scripting.Arg[str | None]
    archive_watermark: scripting.Arg[int | None]
    checkpoint_id: scripting.Arg[str | None]
    at: scripting.Arg[str]
    final: scripting.Arg[bool]


class OutcomeStatus(enum.StrEnum):
    STORED = "stored"
    REPEATED = "repeated"
    CONFLICT = "conflict"
    MISMATCH = "mismatch"
    """Replies the `field` that differs from the accepted directive."""
    FORBIDDEN = "forbidden"
    NOT_REPLACEMENT = "not_replacement"


@dataclasses.dataclass(frozen=True)
class Outcome(Reported, scripting.Call[OutcomeStatus], script="outcome"):
    outcome: scripting.Key
    task: scripting.Key
    counters: scripting.Key
    events: scripting.Key
    refusal: scripting.Key
    attention: scripting.Key
    fence: scripting.Key
    outcome_fields: scripting.Arg[Mapping[str, str]]
    task_recovery: scripting.Arg[Mapping[str, Any]]
    at: scripting.Arg[str]
    swarm: scripting.Arg[str]
    detail: scripting.Arg[str]


class RefusalStatus(enum.StrEnum):
    STORED = "stored"
    FORBIDDEN = "forbidden"
    NOT_REPLACEMENT = "not_replacement"
    CONFLICT = "conflict"


@dataclasses.dataclass(frozen=True)
class Refusal(Reported, scripting.Call[RefusalStatus], script="refusal"):
    refusal: scripting.Key
    events: scripting.Key
    outcome: scripting.Key
    reason: scripting.Arg[str]
    at: scripting.Arg[str]
    swarm: scripting.Arg[str]
    detail: scripting.Arg[str]


GUARDED: tuple[type[scripting.Call[Any]], ...] = (
    housekeeping.LeaseRenew,
    housekeeping.LeaseRelease,
    ApplySwarm,
    housekeeping.Pause,
    housekeeping.StateLost,
    Fence,
    Release,
    Pend,
    Reoffer,
    Accept,
    Restore,
    Launched,
    housekeeping.Settle,
    housekeeping.Absent,
    housekeeping.Listed,
    Capture,
    Outcome,
    Refusal,
    housekeeping.Request,
    housekeeping.DropRequest,
)
"""Every script run under the lease."""

UNGUARDED: tuple[type[scripting.Read], ...] = (housekeeping.LeaseAcquire, housekeeping.PassReads)
"""The scripts run without it."""
