"""The records kept as JSON documents rather than hashes: an attempt's scope, the decision a
replacement's Pod carries (`Admitted`), a fence's releases, a resume offer, a recorded
decision request, a project. Pure: no Redis here; the JSON uses the spec's lowercase words.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from services.common import directives
from services.controller.state import vocabulary


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

    choice: vocabulary.Choice
    source: vocabulary.DecisionSource
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
            choice=vocabulary.Choice(raw["choice"]),
            source=vocabulary.DecisionSource(raw["source"]),
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
class Release:
    """One release a fence performed."""

    kind: vocabulary.ReleaseKind
    released_at: str
    controller_epoch: int

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "released_at": self.released_at,
            "controller_epoch": self.controller_epoch,
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
class Request:
    """A recorded restore-decision request; the next pass applies it under the lease."""

    execution_id: vocabulary.ExecutionId
    choice: vocabulary.Choice
    source: vocabulary.DecisionSource
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
            execution_id=vocabulary.ExecutionId(raw["execution_id"]),
            choice=vocabulary.Choice(raw["choice"]),
            source=vocabulary.DecisionSource(raw["source"]),
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
