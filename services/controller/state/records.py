"""The controller's records kept as Redis hashes, and the principals that call it.

Pure: no Redis here. In Redis every record is a hash of text fields (a missing field is None),
so a Lua script can read and set one field without decoding a document; `codec` writes and
reads them. The JSON forms use the spec's lowercase words (`native`, `oom_killed`, `resume`,
`recovery_pending`).

The spec's words (`vocabulary`) and the records kept as JSON (`documents`) are named here too,
so that every record type reads `records.X` wherever it is used.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, ClassVar

from services.common import directives, tokens
from services.controller.state import codec
from services.controller.state.documents import Admitted as Admitted
from services.controller.state.documents import AttemptScope as AttemptScope
from services.controller.state.documents import Offer as Offer
from services.controller.state.documents import Project as Project
from services.controller.state.documents import Release as Release
from services.controller.state.documents import Request as Request
from services.controller.state.vocabulary import AUTHORITY_RELEASES as AUTHORITY_RELEASES
from services.controller.state.vocabulary import LOST_LENGTH as LOST_LENGTH
from services.controller.state.vocabulary import NO_LOST_TAIL as NO_LOST_TAIL
from services.controller.state.vocabulary import RECOVERY_PENDING as RECOVERY_PENDING
from services.controller.state.vocabulary import Choice as Choice
from services.controller.state.vocabulary import DecisionSource as DecisionSource
from services.controller.state.vocabulary import DecisionState as DecisionState
from services.controller.state.vocabulary import ExecutionId as ExecutionId
from services.controller.state.vocabulary import ExecutionState as ExecutionState
from services.controller.state.vocabulary import ReleaseKind as ReleaseKind
from services.controller.state.vocabulary import SeatName as SeatName
from services.controller.state.vocabulary import SeatState as SeatState

text_hash = codec.text_hash
directive_fields = codec.directive_fields


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
