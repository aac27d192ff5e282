"""What a worker Pod is told about what happened to it: the Kubernetes Events of recovery (pure).

Each fence, recovery and outcome event of a swarm's stream (`telemetry`) that concerns a worker
Pod becomes a `Notice`: on the fenced attempt's Pod for the fence and the wait for a decision; on
both Pods for the accepted decision (the fenced Pod is usually gone by the time anyone looks:
the replacement's tells why it exists); on the replacement's Pod for its launch, a refused
restore and a verified outcome. A notice's note is written here from named fields only: the
spec's reason codes, execution ids, generations, continuity, checkpoint ids and record numbers.
It never carries a credential, a session id, a task's text or anything a worker sent beyond a
reason code.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping
from typing import Any, Protocol

REPORTING_CONTROLLER = "agentihooks.io/controller"
"""The Events' `reportingController`: this controller, whichever replica posts."""


class Reason(enum.StrEnum):
    """An Event's reason (CamelCase, as Kubernetes components write them)."""

    FENCED = "Fenced"
    AWAITING_DECISION = "AwaitingDecision"
    DECISION_ACCEPTED = "DecisionAccepted"
    REPLACEMENT_LAUNCHED = "ReplacementLaunched"
    RESTORE_REFUSED = "RestoreRefused"
    OUTCOME_VERIFIED = "OutcomeVerified"
    STATE_LOST = "StateLost"


ACTIONS = {
    Reason.FENCED: "Fence",
    Reason.AWAITING_DECISION: "Decide",
    Reason.DECISION_ACCEPTED: "Decide",
    Reason.REPLACEMENT_LAUNCHED: "Launch",
    Reason.RESTORE_REFUSED: "Restore",
    Reason.OUTCOME_VERIFIED: "Restore",
    Reason.STATE_LOST: "Recover",
}
"""What the controller (or, for a restore, the replacement) did: the Event's `action`."""

WARNINGS = frozenset(
    {Reason.FENCED, Reason.AWAITING_DECISION, Reason.RESTORE_REFUSED, Reason.STATE_LOST}
)
"""Reasons an operator should look at: Events of type `Warning` (the others are `Normal`)."""

NOTE_LIMIT = 1024
"""The longest note the API server accepts (bytes)."""

_CODE = re.compile(r"[a-z][a-z0-9_ ]{0,79}")
"""A reason code as the spec writes them (`corrupt_object`, `no checkpoint store is …`)."""
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/-]{0,252}")
"""An identifier (execution, checkpoint, seat): nothing else is put in a note."""


class StreamEvent(Protocol):
    """What a notice is made from: one event of a swarm's stream (`telemetry.Event`)."""

    @property
    def kind(self) -> str: ...
    @property
    def swarm(self) -> str: ...
    @property
    def seat(self) -> str: ...
    @property
    def execution_id(self) -> str: ...
    @property
    def expected_generation(self) -> int: ...
    @property
    def observed_generation(self) -> int: ...
    @property
    def detail(self) -> Mapping[str, Any]: ...
    @property
    def at(self) -> str: ...


@dataclasses.dataclass(frozen=True)
class Notice:
    """One Kubernetes Event to record about an attempt's Pod.

    Attributes:
        swarm: The swarm.
        seat: The seat.
        execution_id: The attempt whose Pod the Event is about (`regarding`).
        reason: Why (the Event's reason).
        note: What happened, for a person (no secret, no conversation text).
        related_execution_id: Another attempt whose Pod the Event names (`related`): the
            replacement of a fenced attempt.
        at: When it happened (RFC 3339), or "" for now.
        pod_object: About one Pod object rather than the attempt: a Pod created again under
            the same name (a relaunched replacement) gets an Event of its own.
        pod_pending: Its Pod may not be created yet (the replacement a decision admitted): the
            Event waits a little for it, so that it names the Pod's uid.
    """

    swarm: str
    seat: str
    execution_id: str
    reason: Reason
    note: str
    related_execution_id: str | None = None
    at: str = ""
    pod_object: bool = False
    pod_pending: bool = False

    @property
    def action(self) -> str:
        return ACTIONS[self.reason]

    @property
    def type(self) -> str:
        return "Warning" if self.reason in WARNINGS else "Normal"


def of_event(event: StreamEvent) -> list[Notice]:
    """The notices a stream event gives: none when it concerns no Pod of its own (a request
    applied or refused, a relaunch: its Pod's creation is told by `launched`)."""
    detail = event.detail
    attempt = f"{_word(event.execution_id)} (generation {event.expected_generation})"

    def notice(reason: Reason, note: str, related: str | None = None) -> Notice:
        return Notice(
            event.swarm, event.seat, event.execution_id, reason, _cut(note), related, event.at
        )

    if event.kind == "fence":
        return [notice(Reason.FENCED, f"Fenced {attempt}: {_failure(detail)}{_tail(detail)}")]
    if event.kind == "recovery":
        decision = detail.get("decision")
        if decision == "recovery_pending":
            offer = _offer(detail.get("offer"))
            note = f"{attempt} awaits a decision: {_failure(detail)}; {offer}"
            return [notice(Reason.AWAITING_DECISION, note)]
        if decision == "accepted":
            replacement = detail.get("replacement_execution_id")
            note = (
                f"{_code(detail.get('choice'))} accepted for {attempt}"
                f" ({_code(detail.get('source'))}): {_directive(detail.get('directive'))}"
            )
            if not replacement:
                return [notice(Reason.DECISION_ACCEPTED, note)]
            replacement = str(replacement)
            generation = event.expected_generation + 1
            note += f"; replacement {_word(replacement)} (generation {generation})"
            on_fenced = notice(Reason.DECISION_ACCEPTED, note, replacement)
            on_replacement = dataclasses.replace(
                on_fenced,
                execution_id=replacement,
                related_execution_id=event.execution_id,
                pod_pending=True,
            )
            return [on_fenced, on_replacement]
        return []
    if event.kind == "outcome":
        attempt = f"{_word(event.execution_id)} (generation {event.observed_generation})"
        if detail.get("outcome") == "verified":
            archived = detail.get("archive_watermark")
            note = f"{attempt} restored {_continuity(detail)}"
            if archived is not None:
                note += f"; archive watermark {_number(archived)}"
            return [notice(Reason.OUTCOME_VERIFIED, note)]
        if detail.get("outcome") == "refused":
            note = f"{attempt} refused its restore: {refusal(detail)}"
            return [notice(Reason.RESTORE_REFUSED, note)]
    return []


def launched(swarm: str, seat: str, execution_id: str, generation: int) -> Notice | None:
    """The notice of a worker Pod just created: only a replacement's (generation 2 and later)
    is told; a seat's first attempt is no recovery."""
    if generation < 2:
        return None
    return Notice(
        swarm,
        seat,
        execution_id,
        Reason.REPLACEMENT_LAUNCHED,
        f"Launched replacement {_word(execution_id)} (generation {generation}) on seat"
        f" {_word(seat)}",
        pod_object=True,
    )


def state_lost(swarm: str, seat: str, execution_id: str, kind: str, epoch: int) -> Notice:
    """The notice on each running worker of a swarm whose recovery state Redis lost: nothing
    recovers it until the state is back (`losses`)."""
    note = (
        f"The recovery state of swarm {_word(swarm)} was lost ({_code(kind)}; this worker was"
        f" launched under epoch {epoch}): its failures are not recovered until the state is"
        " back (see the controller's readiness)"
    )
    return Notice(swarm, seat, execution_id, Reason.STATE_LOST, _cut(note))


def refusal(detail: Mapping[str, Any]) -> str:
    """The reason code of a refused restore: the part before any `:` when it is a code, else
    `unknown` (a worker's report is never quoted beyond its code)."""
    return _code(str(detail.get("reason") or "").split(":", 1)[0].strip())


def _failure(detail: Mapping[str, Any]) -> str:
    return _code(detail.get("reason"))


def _tail(detail: Mapping[str, Any]) -> str:
    watermark = detail.get("archive_watermark")
    lost = detail.get("lost_tail")
    length = lost.get("length") if isinstance(lost, Mapping) else None
    parts = []
    if watermark is not None:
        parts.append(f"archive watermark {_number(watermark)}")
    if length is not None:
        parts.append(f"lost tail {_code(length)}")
    return "; " + "; ".join(parts) if parts else ""


def _offer(offer: Any) -> str:
    if not isinstance(offer, Mapping) or not offer.get("checkpoint_id"):
        return "offer: fresh only"
    return (
        f"offer: {_code(offer.get('continuity'))} resume from {_word(offer['checkpoint_id'])}"
        f" at record {_number(offer.get('watermark'))}, or fresh"
    )


def _directive(directive: Any) -> str:
    if not isinstance(directive, Mapping):
        return "fresh"
    return _continuity(directive)


def _continuity(fields: Mapping[str, Any]) -> str:
    """`native from ckpt-7 at record 412`, or `fresh`."""
    recovery = _code(fields.get("recovery"))
    if not fields.get("checkpoint_id"):
        return recovery
    return (
        f"{recovery} from {_word(fields['checkpoint_id'])}"
        f" at record {_number(fields.get('watermark'))}"
    )


def _code(value: Any) -> str:
    text = str(value) if value is not None else ""
    return text if _CODE.fullmatch(text) else "unknown"


def _word(value: Any) -> str:
    text = str(value) if value is not None else ""
    return text if _WORD.fullmatch(text) else "?"


def _number(value: Any) -> str:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else "?"


def _cut(note: str) -> str:
    data = note.encode()
    if len(data) <= NOTE_LIMIT:
        return note
    return data[: NOTE_LIMIT - 3].decode(errors="ignore") + "..."
