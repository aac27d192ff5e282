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
from typing import Any, NewType

from services.common import directives, tokens

ExecutionId = NewType("ExecutionId", str)
SeatName = NewType("SeatName", str)

RECOVERY_PENDING = "recovery_pending"
"""The awaiting value of a task while its recovery is open, and a pending decision's state."""

LOST_LENGTH = "unknown"
"""The fence's lost tail when the attempt was lost without a final capture (the spec's case)."""
NO_LOST_TAIL = "none"
"""The fence's lost tail after the sidecar's final capture: nothing completed is unarchived."""
"""Nobody can count transcript that was never archived."""


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


Hash = Mapping[str, str]


def _s(h: Hash, name: str) -> str | None:
    value = h.get(name)
    return value if value else None


def _i(h: Hash, name: str) -> int | None:
    value = h.get(name)
    return int(value) if value not in (None, "") else None


def _b(h: Hash, name: str) -> bool:
    return h.get(name) == "1"


def _put(out: dict[str, str], name: str, value: str | int | bool | None) -> None:
    if value is None or value == "":
        return
    if isinstance(value, bool):
        out[name] = "1" if value else "0"
    else:
        out[name] = str(value)


def text_hash(raw: Mapping[bytes | str, bytes | str]) -> dict[str, str]:
    """A hash as redis-py returns it (bytes or text) with text keys and values."""
    try:
        # A bytes client's answer (the controller's): every key and value is bytes.
        return {k.decode(): v.decode() for k, v in raw.items()}  # type: ignore[union-attr]
    except AttributeError:
        return {_text(k): _text(v) for k, v in raw.items()}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


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
class Seat:
    """A seat: its current attempt and, once one failed, the attempt being recovered."""

    seat: SeatName
    task_id: str
    current_execution_id: ExecutionId
    generation: int
    state: SeatState
    fenced_execution_id: ExecutionId | None

    @classmethod
    def from_hash(cls, h: Hash) -> Seat:
        fenced = _s(h, "fenced_execution")
        return cls(
            seat=SeatName(h["seat"]),
            task_id=h["task_id"],
            current_execution_id=ExecutionId(h["current"]),
            generation=int(h["generation"]),
            state=SeatState(h["state"]),
            fenced_execution_id=ExecutionId(fenced) if fenced else None,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "seat": self.seat,
            "task_id": self.task_id,
            "current_execution_id": self.current_execution_id,
            "generation": self.generation,
            "state": self.state.value,
        }


def directive_fields(d: directives.Directive) -> dict[str, str]:
    """A directive as flat execution fields, checked first: a disagreeing one is never written."""
    directives.checked(d)
    out: dict[str, str] = {"directive.recovery": d.recovery.value}
    _put(out, "directive.checkpoint_id", d.checkpoint_id)
    _put(out, "directive.session_id", d.session_id)
    _put(out, "directive.watermark", d.watermark)
    return out


def _directive(h: Hash) -> directives.Directive:
    return directives.checked(
        directives.Directive(
            checkpoint_id=_s(h, "directive.checkpoint_id"),
            recovery=directives.Continuity(h.get("directive.recovery") or "fresh"),
            session_id=_s(h, "directive.session_id"),
            watermark=_i(h, "directive.watermark"),
        )
    )


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
class Execution:
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
    image: str
    state: ExecutionState
    directive: directives.Directive
    credential_id: str
    credential_issued_at: int
    capture_grant_id: str
    restore_grant_id: str | None
    restores_from_execution: ExecutionId | None
    restores_from_generation: int
    legacy_spawn: bool
    account: str | None
    native_session_id: str | None
    archive_watermark: int | None
    captured_checkpoint_id: str | None
    launched: bool
    admitted_at: str
    task_text: str = ""
    relaunches: int = 0
    """How often the same execution was launched again after a restore refusal."""
    admission: Admitted | None = None
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

    def to_hash(self) -> dict[str, str]:
        out = directive_fields(self.directive)
        for name in (
            "execution_id",
            "swarm",
            "seat",
            "task_id",
            "image",
            "credential_id",
            "capture_grant_id",
            "restore_grant_id",
            "restores_from_execution",
            "account",
            "native_session_id",
            "captured_checkpoint_id",
            "admitted_at",
            "task_text",
        ):
            _put(out, name, getattr(self, name))
        for name in (
            "generation",
            "task_generation",
            "credential_issued_at",
            "restores_from_generation",
            "archive_watermark",
            "relaunches",
        ):
            _put(out, name, getattr(self, name))
        _put(out, "state", self.state.value)
        _put(out, "legacy_spawn", self.legacy_spawn)
        _put(out, "launched", self.launched)
        if self.admission is not None:
            out["admission"] = json.dumps(self.admission.to_json(), sort_keys=True)
        return out

    @classmethod
    def from_hash(cls, h: Hash) -> Execution:
        restores = _s(h, "restores_from_execution")
        return cls(
            execution_id=ExecutionId(h["execution_id"]),
            swarm=h["swarm"],
            seat=SeatName(h["seat"]),
            generation=int(h["generation"]),
            task_id=h["task_id"],
            task_generation=int(h["task_generation"]),
            image=h.get("image", ""),
            state=ExecutionState(h["state"]),
            directive=_directive(h),
            credential_id=h["credential_id"],
            credential_issued_at=int(h["credential_issued_at"]),
            capture_grant_id=h["capture_grant_id"],
            restore_grant_id=_s(h, "restore_grant_id"),
            restores_from_execution=ExecutionId(restores) if restores else None,
            restores_from_generation=_i(h, "restores_from_generation") or 0,
            legacy_spawn=_b(h, "legacy_spawn"),
            account=_s(h, "account"),
            native_session_id=_s(h, "native_session_id"),
            archive_watermark=_i(h, "archive_watermark"),
            captured_checkpoint_id=_s(h, "captured_checkpoint_id"),
            launched=_b(h, "launched"),
            admitted_at=h.get("admitted_at", ""),
            task_text=h.get("task_text", ""),
            relaunches=_i(h, "relaunches") or 0,
            admission=_admission(h),
        )


def _admission(h: Hash) -> Admitted | None:
    raw = _s(h, "admission")
    return Admitted.from_json(json.loads(raw)) if raw else None


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


@dataclasses.dataclass(frozen=True)
class Fence:
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
    releases: tuple[Release, ...]
    final_capture: bool = False
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

    @classmethod
    def from_hash(cls, h: Hash) -> Fence:
        releases = []
        for kind in ReleaseKind:
            raw = h.get(f"release:{kind.value}")
            if raw:
                data = json.loads(raw)
                releases.append(Release(kind, data["released_at"], int(data["controller_epoch"])))
        return cls(
            execution_id=ExecutionId(h["execution_id"]),
            swarm=h["swarm"],
            generation=int(h["generation"]),
            seat=SeatName(h["seat"]),
            reason=h["reason"],
            controller_epoch=int(h["controller_epoch"]),
            native_session_id=_s(h, "native_session_id"),
            archive_watermark=_i(h, "archive_watermark"),
            fenced_at=h["fenced_at"],
            task_id=h["task_id"],
            task_generation=int(h["task_generation"]),
            releases=tuple(releases),
            final_capture=h.get("lost_tail") == NO_LOST_TAIL,
        )

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
class Decision:
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
    replacement_execution_id: ExecutionId | None = None
    replacement_generation: int | None = None
    decided_at: str | None = None
    offer_key: str | None = None

    @classmethod
    def from_hash(cls, h: Hash) -> Decision:
        offer = _s(h, "offer")
        choice, source, repl = _s(h, "choice"), _s(h, "source"), _s(h, "replacement")
        return cls(
            execution_id=ExecutionId(h["execution_id"]),
            state=DecisionState(h["state"]),
            offer=Offer.from_json(json.loads(offer)) if offer else None,
            controller_epoch=int(h["controller_epoch"]),
            choice=Choice(choice) if choice else None,
            source=DecisionSource(source) if source else None,
            agent=_s(h, "agent"),
            directive=_directive(h) if h.get("directive.recovery") else None,
            replacement_execution_id=ExecutionId(repl) if repl else None,
            replacement_generation=_i(h, "replacement_generation"),
            decided_at=_s(h, "decided_at"),
            offer_key=h.get("offer_key"),
        )

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
class Outcome:
    """A restore outcome as the controller stored it."""

    execution_id: ExecutionId
    recovery: directives.Continuity
    checkpoint_id: str | None
    session_id: str | None
    watermark: int | None
    archive_watermark: int | None
    verified: bool
    reported_at: str

    def to_hash(self) -> dict[str, str]:
        out: dict[str, str] = {}
        _put(out, "execution_id", self.execution_id)
        _put(out, "recovery", self.recovery.value)
        _put(out, "checkpoint_id", self.checkpoint_id)
        _put(out, "session_id", self.session_id)
        _put(out, "watermark", self.watermark)
        _put(out, "archive_watermark", self.archive_watermark)
        _put(out, "verified", self.verified)
        _put(out, "reported_at", self.reported_at)
        return out

    @classmethod
    def from_hash(cls, h: Hash) -> Outcome:
        return cls(
            execution_id=ExecutionId(h["execution_id"]),
            recovery=directives.Continuity(h["recovery"]),
            checkpoint_id=_s(h, "checkpoint_id"),
            session_id=_s(h, "session_id"),
            watermark=_i(h, "watermark"),
            archive_watermark=_i(h, "archive_watermark"),
            verified=_b(h, "verified"),
            reported_at=h["reported_at"],
        )

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
class Task:
    """A ledger row."""

    task_id: str
    seat: SeatName
    text: str
    awaiting: str
    recovery: Mapping[str, Any] | None
    task_generation: int
    held: bool

    @classmethod
    def from_hash(cls, h: Hash) -> Task:
        recovery = _s(h, "recovery")
        return cls(
            task_id=h["task_id"],
            seat=SeatName(h["seat"]),
            text=h.get("text", ""),
            awaiting=h.get("awaiting", ""),
            recovery=json.loads(recovery) if recovery else None,
            task_generation=int(h.get("task_generation", "1")),
            held=_b(h, "held"),
        )

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


@dataclasses.dataclass(frozen=True)
class SwarmConfig:
    """What every attempt of the swarm launches with (from the swarm document)."""

    swarm: str
    worker_image: str
    harness: str
    command: tuple[str, ...]
    projects: tuple[Project, ...]
    restore_automation: bool
    checkpoint_remote: bool
    continuation_prompt: str = ""
    """The prompt a natively resumed worker continues with; empty: the restorer's default."""

    def to_hash(self) -> dict[str, str]:
        return {
            "swarm": self.swarm,
            "worker_image": self.worker_image,
            "harness": self.harness,
            "command": json.dumps(list(self.command)),
            "projects": json.dumps([p.to_json() for p in self.projects]),
            "restore_automation": "1" if self.restore_automation else "0",
            "checkpoint_remote": "1" if self.checkpoint_remote else "0",
            "continuation_prompt": self.continuation_prompt,
        }

    @classmethod
    def from_hash(cls, h: Hash) -> SwarmConfig:
        return cls(
            swarm=h["swarm"],
            worker_image=h["worker_image"],
            harness=h["harness"],
            command=tuple(json.loads(h["command"])),
            projects=tuple(Project(p["name"], p["repository"]) for p in json.loads(h["projects"])),
            restore_automation=_b(h, "restore_automation"),
            checkpoint_remote=_b(h, "checkpoint_remote"),
            # Absent from configs written before the field existed.
            continuation_prompt=h.get("continuation_prompt", ""),
        )


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
