"""The scripts that keep the books around the transitions (see `transitions`): the lease, what
a listing pass reads, the attention and expected sets, recorded requests, the pause switch."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from typing import Any

from services.controller.state import scripting


class Renewed(enum.StrEnum):
    RENEWED = "renewed"


@dataclasses.dataclass(frozen=True)
class LeaseRenew(scripting.Call[Renewed], script="lease_renew"):
    ttl_ms: scripting.Arg[int]


class Released(enum.StrEnum):
    RELEASED = "released"


@dataclasses.dataclass(frozen=True)
class LeaseRelease(scripting.Call[Released], script="lease_release"):
    pass


@dataclasses.dataclass(frozen=True)
class LeaseAcquire(scripting.Read, script="lease_acquire"):
    """Answers the epoch of this holder's acquisition, or nil when another holds the lease."""

    lease: scripting.Key
    epoch: scripting.Key
    holder: scripting.Arg[str]
    ttl_ms: scripting.Arg[int]
    floor: scripting.Arg[int]


@dataclasses.dataclass(frozen=True)
class PassReads(scripting.Read, script="pass_reads"):
    """Answers the expected attempts, the attention set, the seats only awaiting their
    replacement's report, the other attention seats, the recorded requests and whether the
    swarm's config exists."""

    expected: scripting.Key
    attention: scripting.Key
    requests: scripting.Key
    config: scripting.Key
    seat_prefix: scripting.Arg[str]
    fence_prefix: scripting.Arg[str]
    decision_prefix: scripting.Arg[str]
    execution_prefix: scripting.Arg[str]
    skip: scripting.Arg[Sequence[str]]
    release_fields: scripting.Arg[Sequence[str]]


class PauseSet(enum.StrEnum):
    SET = "set"


@dataclasses.dataclass(frozen=True)
class Pause(scripting.Call[PauseSet], script="pause"):
    paused: scripting.Key
    pause: scripting.Arg[bool]
    at: scripting.Arg[str]


class Marked(enum.StrEnum):
    MARKED = "marked"


@dataclasses.dataclass(frozen=True)
class StateLost(scripting.Call[Marked], script="state_lost"):
    marker: scripting.Key
    loss: scripting.Arg[str]
    """The loss as JSON, or "" once the swarm's state is back."""


class SettleStatus(enum.StrEnum):
    SETTLED = "settled"
    BUSY = "busy"


@dataclasses.dataclass(frozen=True)
class Settle(scripting.Call[SettleStatus], script="settle"):
    attention: scripting.Key
    seat: scripting.Key
    execution: scripting.Key
    fence: scripting.Key
    fenced: scripting.Arg[bool]


class AbsentStatus(enum.StrEnum):
    """Each replies `passes`, the count, but `stale`."""

    COUNTED = "counted"
    EVICT = "evict"
    RELAUNCH = "relaunch"
    STALE = "stale"


@dataclasses.dataclass(frozen=True)
class Absent(scripting.Call[AbsentStatus], script="absent"):
    seat: scripting.Key
    execution: scripting.Key
    refusal: scripting.Key
    expected: scripting.Key
    attention: scripting.Key
    events: scripting.Key
    execution_id: scripting.Arg[str]
    generation: scripting.Arg[int]
    threshold: scripting.Arg[int]
    at: scripting.Arg[str]
    swarm: scripting.Arg[str]


class ListedStatus(enum.StrEnum):
    RECORDED = "recorded"


@dataclasses.dataclass(frozen=True)
class Listed(scripting.Call[ListedStatus], script="listed"):
    expected: scripting.Key
    refusals: scripting.Keys
    """The refusal key of each attempt in `finished`, in its order."""
    again: scripting.Arg[Sequence[str]]
    finished: scripting.Arg[Sequence[str]]


class RequestStatus(enum.StrEnum):
    RECORDED = "recorded"
    EXISTS = "exists"


@dataclasses.dataclass(frozen=True)
class Request(scripting.Call[RequestStatus], script="request"):
    requests: scripting.Key
    field: scripting.Arg[str]
    request: scripting.Arg[Mapping[str, Any]]


class Dropped(enum.StrEnum):
    DROPPED = "dropped"


@dataclasses.dataclass(frozen=True)
class DropRequest(scripting.Call[Dropped], script="drop_request"):
    requests: scripting.Key
    events: scripting.Key
    field: scripting.Arg[str]
    execution_id: scripting.Arg[str]
    """'' records no event."""
    swarm: scripting.Arg[str]
    seat: scripting.Arg[str]
    detail: scripting.Arg[str]
    at: scripting.Arg[str]
