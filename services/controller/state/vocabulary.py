"""The spec's words for the controller's records: identifiers, states, choices, who chose,
what a fence releases. Pure: no Redis here. The words are the stored values and the JSON
forms (`running`, `recovery_pending`, `resume`, `launch_grant`)."""

from __future__ import annotations

import enum
from typing import NewType

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
