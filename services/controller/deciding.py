"""How a fenced attempt's seat returns: pure, table-driven, no I/O.

`decide` answers the spec's "Decide" step: resume natively without asking exactly when restore
automation is on and not paused, the reason is not image_pull, the attempt held a native
session id, and the newest complete checkpoint compatible with the current worker image is a
native one; a superseded legacy spawn is replaced fresh while automation is on and not paused;
everything else waits for the master or operator. `resume_plan` and `fresh_plan` are what the
two choices pick. A directive whose fields disagree is never produced (`directives.checked`).

A restore never reports more continuity than it delivered, so a checkpoint whose transcript
holds no conversation record (watermark 0: a source-only capture before the first turn) offers
no continuity: resume passes over it, it never makes the automatic resume condition true, and a
card offers only fresh for it. `card_view` is what a handoff card shows: the offer worked out
against the controller's current compatibility key (checkpoints are offered only when they were
captured under the same compatibility key as the controller's current worker image tag).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence
from typing import Protocol

from services.common import directives, errors
from services.controller.state import records

NO_CHECKPOINT = "no complete compatible checkpoint to resume from"
NOT_PENDING = "no recovery decision is pending for this attempt"

RESUME_NATIVE = "Resume native"
CONTINUE_FROM_CONTEXT = "Continue from context"

IMAGE_PULL = "image_pull"
NATIVE = "native"  # a checkpoint's continuity; the other is context_only


class Checkpoint(Protocol):
    """What deciding reads of a checkpoint summary (`checkpoints.records.Summary` fits)."""

    @property
    def checkpoint_id(self) -> str: ...

    @property
    def continuity(self) -> str: ...

    @property
    def native_session_id(self) -> str | None: ...

    @property
    def watermark(self) -> int | None: ...


@dataclasses.dataclass(frozen=True)
class Switches:
    """The switches `decide` reads besides the fence and the checkpoints."""

    automation: bool
    paused: bool
    legacy_spawn: bool


class Action(enum.Enum):
    """What the pass does with a fenced attempt."""

    RESUME = "resume"  # automatic native resume
    FRESH = "fresh"  # automatic fresh replacement of a legacy spawn
    WAIT = "wait"  # awaiting-decision; the decision stays recovery_pending


@dataclasses.dataclass(frozen=True)
class Plan:
    """What `decide` chose, with the offer the handoff card shows."""

    action: Action
    offer: records.Offer | None
    directive: directives.Directive | None = None
    choice: records.Choice | None = None
    source: records.DecisionSource | None = None


def holds_conversation(watermark: int | None) -> bool:
    """Whether a transcript cursor names at least one conversation record (the watermark is the
    number of records archived). Without one a checkpoint offers no continuity: restoring it
    would report a conversation that was never restored."""
    return watermark is not None and watermark >= 1


def usable(checkpoints: Sequence[Checkpoint]) -> Checkpoint | None:
    """The newest checkpoint a directive can name (listed newest first): one that holds at least
    one conversation record. One without a durable watermark cannot be restored from, and one at
    watermark 0 holds no conversation; both are passed over."""
    for checkpoint in checkpoints:
        if holds_conversation(checkpoint.watermark):
            return checkpoint
    return None


def offer(fence: records.Fence, checkpoints: Sequence[Checkpoint]) -> records.Offer | None:
    """How a resume would continue: native when the newest usable checkpoint is native and the
    attempt held a session id, else from context; None without a usable checkpoint.

    `checkpoints` are the attempt's complete checkpoints captured under the controller's
    current compatibility key (its worker image tag), newest first."""
    newest = usable(checkpoints)
    if newest is None or newest.watermark is None:
        return None
    native = newest.continuity == NATIVE and bool(fence.native_session_id)
    kind = directives.Continuity.NATIVE if native else directives.Continuity.RECONSTRUCTED
    return records.Offer(newest.checkpoint_id, kind, newest.watermark)


def resume_plan(fence: records.Fence, checkpoints: Sequence[Checkpoint]) -> directives.Directive:
    """The directive of a resume: the newest complete, compatible checkpoint of the attempt.

    Native continuity names the session the fenced attempt held (the restorer refuses a
    checkpoint whose session differs: `conversation_mismatch`).

    Raises:
        errors.Refused: no usable checkpoint, that is none holding a conversation record
            (`no complete compatible checkpoint to resume from`); the seat keeps waiting.
    """
    chosen = offer(fence, checkpoints)
    if chosen is None:
        raise errors.Refused(NO_CHECKPOINT)
    session = fence.native_session_id if chosen.continuity is directives.Continuity.NATIVE else None
    return directives.checked(
        directives.Directive(chosen.checkpoint_id, chosen.continuity, session, chosen.watermark)
    )


def fresh_plan() -> directives.Directive:
    """The directive of a fresh replacement: no checkpoint, no session, no watermark."""
    return directives.FRESH


def plan_for(
    choice: records.Choice, fence: records.Fence, checkpoints: Sequence[Checkpoint]
) -> directives.Directive:
    """The directive a choice picks (raises like `resume_plan`)."""
    if choice is records.Choice.RESUME:
        return resume_plan(fence, checkpoints)
    return fresh_plan()


Rule = tuple[str, Callable[[records.Fence, records.Offer | None, Switches], bool], Action]

# Read top to bottom; the first rule that holds decides. Anything else waits.
RULES: tuple[Rule, ...] = (
    ("automation off", lambda f, o, s: not s.automation, Action.WAIT),
    ("paused", lambda f, o, s: s.paused, Action.WAIT),
    ("legacy spawn", lambda f, o, s: s.legacy_spawn, Action.FRESH),
    ("image pull", lambda f, o, s: f.reason == IMAGE_PULL, Action.WAIT),
    ("no native session", lambda f, o, s: not f.native_session_id, Action.WAIT),
    (
        "newest checkpoint native",
        lambda f, o, s: o is not None and o.continuity is directives.Continuity.NATIVE,
        Action.RESUME,
    ),
)


def decide(fence: records.Fence, checkpoints: Sequence[Checkpoint], switches: Switches) -> Plan:
    """Decide how the fenced attempt's seat returns (spec: "Decide").

    Args:
        fence: The fence record.
        checkpoints: The attempt's complete checkpoints compatible with the current worker
            image, newest first.
        switches: Restore automation, the pause switch, and whether the attempt was admitted
            from a legacy spawn specification.

    Returns:
        RESUME with a native directive, FRESH (legacy spawn) with the fresh directive, or WAIT.
    """
    found = offer(fence, checkpoints)
    action = next((a for _, holds, a in RULES if holds(fence, found, switches)), Action.WAIT)
    if action is Action.RESUME:
        return Plan(
            action,
            found,
            resume_plan(fence, checkpoints),
            records.Choice.RESUME,
            records.DecisionSource.AUTOMATIC,
        )
    if action is Action.FRESH:
        return Plan(
            action, found, fresh_plan(), records.Choice.FRESH, records.DecisionSource.LEGACY_SPAWN
        )
    return Plan(Action.WAIT, found)


def card_reason(reason: str, found: records.Offer | None) -> str:
    """The handoff card's reason: the failure and, with a verified checkpoint, how it would
    continue and from which record, e.g. `oom_killed; native resume from ckpt-7 at record 412`.

    `found` must be the checkpoint the card offers (see `card_view`): a reason never names a
    checkpoint the card does not offer."""
    if found is None:
        return reason
    how = (
        "native resume"
        if found.continuity is directives.Continuity.NATIVE
        else "continuation from context"
    )
    return f"{reason}; {how} from {found.checkpoint_id} at record {found.watermark}"


def resume_label(found: records.Offer | None) -> str:
    """`Resume native` when the checkpoint supports native resume and the attempt held a
    session, `Continue from context` otherwise; no label ("") when no resume is available."""
    if found is None:
        return ""
    if found.continuity is directives.Continuity.NATIVE:
        return RESUME_NATIVE
    return CONTINUE_FROM_CONTEXT


def offer_is_current(decision: records.Decision | None, compatibility_key: str) -> bool:
    """Whether the offer recorded with a pending decision was worked out under
    `compatibility_key`, the controller's current worker image tag. An offer recorded under
    another key (the controller now runs another worker image), or before the key was recorded,
    must be worked out again: checkpoints are offered only when they were captured under the
    same compatibility key as the controller's current worker image tag."""
    return decision is not None and decision.offer_key == compatibility_key


def accepted_restore(decision: records.Decision) -> records.Offer | None:
    """The checkpoint an accepted decision restores from, as a card names it: its directive's
    checkpoint, continuity and watermark; None for a fresh decision."""
    d = decision.directive
    if d is None or d.checkpoint_id is None or d.watermark is None:
        return None
    if d.recovery is directives.Continuity.FRESH:
        return None
    return records.Offer(d.checkpoint_id, d.recovery, d.watermark)


@dataclasses.dataclass(frozen=True)
class CardView:
    """What a handoff card shows of its offer."""

    reason: str
    checkpoint: str
    resume_available: bool
    resume_label: str


def card_view(
    failure: str, decision: records.Decision | None, current: records.Offer | None
) -> CardView:
    """The card of a fenced attempt (spec: "Choosing resume or fresh").

    While the decision is pending, the card offers `current`, the offer worked out against the
    controller's current compatibility key, when it holds a conversation record: the resume
    control reads `Resume native` or `Continue from context` and the reason names how it would
    continue and from which record. Without one the card offers only fresh: no resume label and
    just the failure as the reason. Once a decision was accepted nothing is offered any more;
    the card names the checkpoint the accepted directive restores from (none for fresh).

    Args:
        failure: The fence's reason.
        decision: The fenced attempt's decision (None while none is recorded yet).
        current: The offer under the current compatibility key (ignored once accepted).
    """
    if decision is not None and decision.state is records.DecisionState.ACCEPTED:
        restored = accepted_restore(decision)
        return CardView(
            reason=card_reason(failure, restored),
            checkpoint=restored.checkpoint_id if restored else "",
            resume_available=False,
            resume_label="",
        )
    offered = current if current is not None and holds_conversation(current.watermark) else None
    return CardView(
        reason=card_reason(failure, offered),
        checkpoint=offered.checkpoint_id if offered else "",
        resume_available=offered is not None,
        resume_label=resume_label(offered),
    )
