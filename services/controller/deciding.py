"""How a fenced attempt's seat returns: pure, table-driven, no I/O.

`decide` answers the spec's "Decide" step: resume natively without asking exactly when restore
automation is on and not paused, the reason is not image_pull, the attempt held a native
session id, and the newest complete checkpoint compatible with the current worker image is a
native one; a superseded legacy spawn is replaced fresh while automation is on and not paused;
everything else waits for the master or operator. `resume_plan` and `fresh_plan` are what the
two choices pick. A directive whose fields disagree is never produced (`directives.checked`).
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


def usable(checkpoints: Sequence[Checkpoint]) -> Checkpoint | None:
    """The newest checkpoint a directive can name (listed newest first; one without a durable
    watermark cannot be restored from and is passed over)."""
    for checkpoint in checkpoints:
        if checkpoint.watermark is not None and checkpoint.watermark >= 0:
            return checkpoint
    return None


def offer(fence: records.Fence, checkpoints: Sequence[Checkpoint]) -> records.Offer | None:
    """How a resume would continue: native when the newest usable checkpoint is native and the
    attempt held a session id, else from context; None without a usable checkpoint."""
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
        errors.Refused: no usable checkpoint (`no complete compatible checkpoint to resume
            from`); the seat keeps waiting.
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
    continue and from which record, e.g. `oom_killed; native resume from ckpt-7 at record 412`."""
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
    session, `Continue from context` otherwise."""
    if found is not None and found.continuity is directives.Continuity.NATIVE:
        return RESUME_NATIVE
    return CONTINUE_FROM_CONTEXT
