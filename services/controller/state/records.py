"""The controller's records and their two forms: Redis hash fields and the spec's JSON.

Pure: no Redis here. In Redis every record is a hash of text fields (a missing field is None),
so a Lua script can read and set one field without decoding a document. The JSON forms use the
spec's lowercase words (`native`, `oom_killed`, `resume`, `recovery_pending`).
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping
from typing import Any, ClassVar, NewType

from services.common import directives, tokens
from services.controller.state import codec

ExecutionId = NewType("ExecutionId", str)
SeatName = NewType("SeatName", str)

RECOVERY_PENDING = "recovery_pending"
"""The awaiting value of a task while its recovery is open, and a pending decision's state."""

LOST_LENGTH = "unknown"
"""The fence's lost tail when the attempt was lost without a final capture (the spec's case)."""
NO_LOST_TAIL = "none"
"""The fence's lost tail after the sidecar's final capture: nothing completed is unarchived."""


class SeatState(enum.StrEnum):
    """Where a seat stands."""

    RUNNING = "running"
    FENCED = "fenced"
    AWAITING_DECISION = "awaiting_decision"
    REPLACING = "replacing"
    RESTORE_REFUSED = "restore_refused"
    """The replacement reported a restore refusal: it is held (neither fenced nor replaced)
    until the operator fixes the cause and relaunches it."""


class ExecutionState(enum.StrEnum):
    """An attempt is running until it is fenced; a fenced attempt never runs again."""

    RUNNING = "running"
    FENCED = "fenced"


class Choice(enum.StrEnum):
    """What the master or operator chooses for a fenced attempt."""

    RESUME = "resume"
    FRESH = "fresh"


class DecisionState(enum.StrEnum):
    """Pending until accepted once; an accepted decision never changes."""

    RECOVERY_PENDING = RECOVERY_PENDING
    ACCEPTED = "accepted"


class DecisionSource(enum.StrEnum):
    """Who made an accepted decision."""

    AUTOMATIC = "automatic"
    OPERATOR = "operator"
    MASTER = "master"
    LEGACY_SPAWN = "legacy_spawn"


class ReleaseKind(enum.StrEnum):
    """What a fence releases, each recorded once."""

    LAUNCH_GRANT = "launch_grant"
    STORE_GRANTS = "store_grants"
    ACCOUNT_SLOT = "account_slot"
    POD = "pod"


AUTHORITY_RELEASES = (ReleaseKind.LAUNCH_GRANT, ReleaseKind.STORE_GRANTS, ReleaseKind.ACCOUNT_SLOT)
"""The releases that end a fenced worker's authority; a replacement waits for all three."""


text_hash = codec.text_hash
directive_fields = codec.directive_fields


@dataclasses.dataclass(frozen=True)
class AttemptScope:
    """The scope one attempt works in; store grants are minted for exactly one scope."""

    swarm: str
    seat: str
    task_id: str
    task_generation: int
    execution_id: str
    execution_generation: int

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Seat(codec.Hashed):
    """A seat: its current attempt and, once one failed, the attempt being recovered."""

    seat: SeatName
    task_id: str
    current_execution_id: ExecutionId = dataclasses.field(metadata=codec.meta(name="current"))
    generation: int
    state: SeatState
    fenced_execution_id: ExecutionId | None = dataclasses.field(
        metadata=codec.meta(name="fenced_execution")
    )

    def to_json(self) -> dict[str, Any]:
        return {
            "seat": self.seat,
            "task_id": self.task_id,
            "current_execution_id": self.current_execution_id,
            "generation": self.generation,
            "state": self.state.value,
        }


@dataclasses.dataclass(frozen=True)
class Admitted:
    """The decision that admitted a replacement and the fence it answered: what the
    replacement's Pod carries in its annotations, so the cluster witnesses the decision when
    Redis lost it. Names, words and numbers only: no token, no conversation content.

    Attributes:
        choice: The accepted choice.
        source: Who chose (automatic, operator, master, legacy_spawn).
        agent: The registered master the choice was made for, if one was named.
        decided_at: When it was accepted.
        decision_epoch: The controller epoch it was accepted under.
        fence_reason: Why the replaced attempt was fenced (the true failure reason).
        fence_epoch: The controller epoch the fence was written under.
        fenced_at: When the fence was written.
        native_session_id: The native session id the fenced attempt held.
        archive_watermark: The fence's archive watermark.
        final_capture: The fence followed the sidecar's final capture (no lost tail).
    """

    choice: Choice
    source: DecisionSource
    agent: str | None
    decided_at: str
    decision_epoch: int
    fence_reason: str
    fence_epoch: int
    fenced_at: str
    native_session_id: str | None = None
    archive_watermark: int | None = None
    final_capture: bool = False

    def to_json(self) -> dict[str, Any]:
        out = {
            "choice": self.choice.value,
            "source": self.source.value,
            "agent": self.agent,
            "decided_at": self.decided_at,
            "decision_epoch": self.decision_epoch,
            "fence_reason": self.fence_reason,
            "fence_epoch": self.fence_epoch,
            "fenced_at": self.fenced_at,
            "native_session_id": self.native_session_id,
            "archive_watermark": self.archive_watermark,
            "final_capture": self.final_capture,
        }
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Admitted:
        """Raises KeyError, ValueError or TypeError on a malformed record."""
        watermark = raw.get("archive_watermark")
        return cls(
            choice=Choice(raw["choice"]),
            source=DecisionSource(raw["source"]),
            agent=_str_or_none(raw.get("agent")),
            decided_at=str(raw["decided_at"]),
            decision_epoch=int(raw["decision_epoch"]),
            fence_reason=str(raw["fence_reason"]),
            fence_epoch=int(raw["fence_epoch"]),
            fenced_at=str(raw.get("fenced_at") or ""),
            native_session_id=_str_or_none(raw.get("native_session_id")),
            archive_watermark=None if watermark is None else int(watermark),
            final_capture=raw.get("final_capture") is True,
        )


def _str_or_none(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


@dataclasses.dataclass(frozen=True)
class Execution(codec.Hashed):
    """One attempt of a seat.

    Token ids are kept, never tokens: the worker credential is re-minted from its id and issue
    time (the same token every time) and store grants are minted on demand under their ids, so a
    revocation by id ends every copy.
    """

    execution_id: ExecutionId
    swarm: str
    seat: SeatName
    generation: int
    task_id: str
    task_generation: int
    image: str = dataclasses.field(metadata=codec.meta(missing=""))
    state: ExecutionState
    directive: directives.Directive
    credential_id: str
    credential_issued_at: int
    capture_grant_id: str
    restore_grant_id: str | None
    restores_from_execution: ExecutionId | None
    restores_from_generation: int = dataclasses.field(metadata=codec.meta(missing=0))
    legacy_spawn: bool
    account: str | None
    native_session_id: str | None
    archive_watermark: int | None
    captured_checkpoint_id: str | None
    launched: bool
    admitted_at: str = dataclasses.field(metadata=codec.meta(missing=""))
    task_text: str = ""
    relaunches: int = 0
    """How often the same execution was launched again after a restore refusal."""
    admission: Admitted | None = dataclasses.field(
        default=None, metadata=codec.meta(sort_keys=True)
    )
    """The decision that admitted this replacement (None for a seat's first attempt)."""

    @property
    def scope(self) -> AttemptScope:
        return AttemptScope(
            self.swarm,
            self.seat,
            self.task_id,
            self.task_generation,
            self.execution_id,
            self.generation,
        )

    @property
    def is_replacement(self) -> bool:
        return self.restores_from_execution is not None


@dataclasses.dataclass(frozen=True)
class Release:
    """One release a fence performed."""

    kind: ReleaseKind
    released_at: str
    controller_epoch: int

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "released_at": self.released_at,
            "controller_epoch": self.controller_epoch,
        }


def _releases(h: codec.Hash) -> tuple[Release, ...]:
    """A fence's releases: one field each, `release:KIND`, a JSON record."""
    releases = []
    for kind in ReleaseKind:
        raw = h.get(f"release:{kind.value}")
        if raw:
            data = json.loads(raw)
            releases.append(Release(kind, data["released_at"], int(data["controller_epoch"])))
    return tuple(releases)


def _releases_hash(releases: tuple[Release, ...]) -> dict[str, str]:
    return {
        f"release:{r.kind.value}": json.dumps(
            {"released_at": r.released_at, "controller_epoch": r.controller_epoch}
        )
        for r in releases
    }


def _final_capture(h: codec.Hash) -> bool:
    return h.get("lost_tail") == NO_LOST_TAIL


def _lost_tail_hash(final_capture: bool) -> dict[str, str]:
    return {"lost_tail": NO_LOST_TAIL} if final_capture else {}


@dataclasses.dataclass(frozen=True)
class Fence(codec.Hashed):
    """The one fence record of a lost attempt."""

    execution_id: ExecutionId
    swarm: str
    generation: int
    seat: SeatName
    reason: str
    controller_epoch: int
    native_session_id: str | None
    archive_watermark: int | None
    fenced_at: str
    task_id: str
    task_generation: int
    releases: tuple[Release, ...] = dataclasses.field(
        metadata=codec.meta(encode=_releases_hash, decode=_releases)
    )
    final_capture: bool = dataclasses.field(
        default=False, metadata=codec.meta(encode=_lost_tail_hash, decode=_final_capture)
    )
    """The sidecar's final capture was reported before the fence: no lost tail."""

    @property
    def lost_tail(self) -> dict[str, Any]:
        """Transcript after the watermark and not archived before the failure is lost: of
        unknown length, or none after a final capture."""
        length = NO_LOST_TAIL if self.final_capture else LOST_LENGTH
        return {"after_watermark": self.archive_watermark, "length": length}

    @property
    def scope(self) -> AttemptScope:
        """The fenced attempt's scope: where its checkpoints are."""
        return AttemptScope(
            self.swarm,
            self.seat,
            self.task_id,
            self.task_generation,
            self.execution_id,
            self.generation,
        )

    def released(self, kind: ReleaseKind) -> bool:
        return any(r.kind is kind for r in self.releases)

    def to_json(self) -> dict[str, Any]:
        return {
            "execution_id": self.execution_id,
            "generation": self.generation,
            "seat": self.seat,
            "reason": self.reason,
            "controller_epoch": self.controller_epoch,
            "native_session_id": self.native_session_id,
            "archive_watermark": self.archive_watermark,
            "lost_tail": self.lost_tail,
            "releases": [r.to_json() for r in self.releases],
            "fenced_at": self.fenced_at,
        }


@dataclasses.dataclass(frozen=True)
class Offer:
    """The checkpoint a resume would continue from, as the card shows it."""

    checkpoint_id: str
    continuity: directives.Continuity  # native or reconstructed
    watermark: int

    def to_json(self) -> dict[str, Any]:
        return {
            "checkpoint_id": self.checkpoint_id,
            "continuity": self.continuity.value,
            "watermark": self.watermark,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Offer:
        return cls(
            raw["checkpoint_id"], directives.Continuity(raw["continuity"]), int(raw["watermark"])
        )


@dataclasses.dataclass(frozen=True)
class Decision(codec.Hashed):
    """The decision for one fenced attempt: pending, then accepted once.

    `offer_key` is the compatibility key (the controller's worker image tag) the recorded offer
    was worked out under; None for a decision recorded before the key was kept.
    """

    execution_id: ExecutionId
    state: DecisionState
    offer: Offer | None
    controller_epoch: int
    choice: Choice | None = None
    source: DecisionSource | None = None
    agent: str | None = None
    directive: directives.Directive | None = None
    replacement_execution_id: ExecutionId | None = dataclasses.field(
        default=None, metadata=codec.meta(name="replacement")
    )
    replacement_generation: int | None = None
    decided_at: str | None = None
    offer_key: str | None = dataclasses.field(default=None, metadata=codec.meta(blank=True))

    def to_json(self) -> dict[str, Any]:
        return {
            "execution_id": self.execution_id,
            "state": self.state.value,
            "choice": self.choice.value if self.choice else None,
            "source": self.source.value if self.source else None,
            "agent": self.agent,
            "directive": self.directive.to_json() if self.directive else None,
            "replacement_execution_id": self.replacement_execution_id,
            "replacement_generation": self.replacement_generation,
            "controller_epoch": self.controller_epoch,
            "decided_at": self.decided_at,
        }


@dataclasses.dataclass(frozen=True)
class Outcome(codec.Hashed):
    """A restore outcome as the controller stored it."""

    execution_id: ExecutionId
    recovery: directives.Continuity
    checkpoint_id: str | None
    session_id: str | None
    watermark: int | None
    archive_watermark: int | None
    verified: bool
    reported_at: str

    def to_json(self) -> dict[str, Any]:
        return {
            "execution_id": self.execution_id,
            "recovery": self.recovery.value,
            "checkpoint_id": self.checkpoint_id,
            "session_id": self.session_id,
            "watermark": self.watermark,
            "archive_watermark": self.archive_watermark,
            "verified": self.verified,
            "reported_at": self.reported_at,
        }


@dataclasses.dataclass(frozen=True)
class Task(codec.Hashed):
    """A ledger row."""

    task_id: str
    seat: SeatName
    text: str = dataclasses.field(metadata=codec.meta(missing=""))
    awaiting: str = dataclasses.field(metadata=codec.meta(missing=""))
    recovery: Mapping[str, Any] | None
    task_generation: int = dataclasses.field(metadata=codec.meta(missing=1))
    held: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "seat": self.seat,
            "text": self.text,
            "awaiting": self.awaiting,
            "recovery": dict(self.recovery) if self.recovery is not None else None,
            "task_generation": self.task_generation,
        }


@dataclasses.dataclass(frozen=True)
class Request:
    """A recorded restore-decision request; the next pass applies it under the lease."""

    execution_id: ExecutionId
    choice: Choice
    source: DecisionSource
    agent: str | None
    credential_sha256: str | None
    requested_at: str

    def to_json(self) -> dict[str, Any]:
        return {
            "execution_id": self.execution_id,
            "choice": self.choice.value,
            "source": self.source.value,
            "agent": self.agent,
            "credential_sha256": self.credential_sha256,
            "requested_at": self.requested_at,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Request:
        return cls(
            execution_id=ExecutionId(raw["execution_id"]),
            choice=Choice(raw["choice"]),
            source=DecisionSource(raw["source"]),
            agent=raw.get("agent"),
            credential_sha256=raw.get("credential_sha256"),
            requested_at=raw.get("requested_at", ""),
        )


@dataclasses.dataclass(frozen=True)
class Project:
    """A project of the worker registration."""

    name: str
    repository: str

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "repository": self.repository}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Project:
        return cls(raw["name"], raw["repository"])


@dataclasses.dataclass(frozen=True)
class SwarmConfig(codec.Hashed):
    """What every attempt of the swarm launches with (from the swarm document)."""

    swarm: str
    worker_image: str
    harness: str
    command: tuple[str, ...]
    projects: tuple[Project, ...]
    restore_automation: bool
    checkpoint_remote: bool
    continuation_prompt: str = ""
    """The prompt a natively resumed worker continues with; empty: the restorer's default.
    Absent from configs written before the field existed."""

    keep_empty: ClassVar[bool] = True


# Principals: who is calling, as the API layer authenticated them.


@dataclasses.dataclass(frozen=True)
class Operator:
    """The holder of the operator token."""


@dataclasses.dataclass(frozen=True)
class Master:
    """A registered master of a swarm, authenticated by its credential.

    `agent` is the name the credential is bound to in the swarm's registration, never a name the
    caller merely claims; `credential_sha256` lets a later check see that the binding still holds.
    """

    swarm: str
    agent: str
    credential_sha256: str = dataclasses.field(repr=False)


@dataclasses.dataclass(frozen=True)
class Worker:
    """An attempt calling with its own worker credential (already checked and not revoked)."""

    credential: tokens.WorkerCredential


Principal = Operator | Master | Worker
