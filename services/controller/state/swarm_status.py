"""The swarm's status read model: what `GetSwarmStatus` and `status --json` show, with the
handoff cards of its fenced attempts.

Built from the reads in `reading`; nothing here writes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from services.common import redis_link
from services.controller import deciding
from services.controller.state import reading, records

PENDING_CONTINUITY = "pending"
"""A card's continuity until the replacement reports its outcome."""


Reoffer = Callable[[records.Fence], Awaitable[records.Offer | None]]
"""Works out a fenced attempt's offer under the controller's current compatibility key (the
caller lists the checkpoint store; this module only reads Redis)."""


@dataclasses.dataclass(frozen=True)
class Card:
    """A card of the Handoff outcomes panel."""

    seat: str
    execution_id: str
    failure: str
    fenced_at: str
    """When the controller fenced the attempt (RFC 3339, UTC): the failure's time as recorded."""
    reason: str
    checkpoint: str
    resume_available: bool
    resume_label: str
    continuity: str
    decision: str
    replacement_execution_id: str
    refusal: str | None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class SwarmStatus:
    """What `GetSwarmStatus` and `status --json` show."""

    swarm: str
    paused: bool
    automation: bool
    tasks: tuple[records.Task, ...]
    seats: tuple[records.Seat, ...]
    handoffs: tuple[Card, ...]
    restore_outcomes_by_type: dict[str, int]
    controller_epoch: int

    def to_json(self) -> dict[str, Any]:
        return {
            "swarm": self.swarm,
            "paused": self.paused,
            "automation": self.automation,
            "tasks": [t.to_json() for t in self.tasks],
            "seats": [s.to_json() for s in self.seats],
            "handoffs": [c.to_json() for c in self.handoffs],
            "restore_outcomes_by_type": dict(self.restore_outcomes_by_type),
            "controller_epoch": self.controller_epoch,
        }


async def card(
    client: redis_link.Client,
    swarm: str,
    at: records.Seat,
    compatibility_key: str,
    reoffer: Reoffer | None = None,
) -> Card | None:
    """The card of a seat whose attempt was fenced (its latest recovery), or None.

    While no decision was accepted, the card offers what resume would pick under
    `compatibility_key`, the controller's current worker image tag: the recorded offer when it
    was worked out under that key, else the one `reoffer` works out now (without `reoffer`,
    nothing: the card offers only fresh). See `deciding.card_view`.
    """
    if at.fenced_execution_id is None:
        return None
    fenced = await reading.fence(client, swarm, at.fenced_execution_id)
    if fenced is None:
        return None
    chosen = await reading.decision(client, swarm, fenced.execution_id)
    accepted = chosen is not None and chosen.state is records.DecisionState.ACCEPTED
    current: records.Offer | None = None
    if chosen is not None and deciding.offer_is_current(chosen, compatibility_key):
        current = chosen.offer
    elif not accepted and reoffer is not None:
        current = await reoffer(fenced)
    view = deciding.card_view(fenced.reason, chosen, current)
    continuity, refused, replacement = PENDING_CONTINUITY, None, ""
    if accepted and chosen is not None:
        replacement = chosen.replacement_execution_id or ""
        if replacement:
            reported = await reading.outcome(client, swarm, replacement)
            continuity = reported.recovery.value if reported else PENDING_CONTINUITY
            refused = await reading.refusal(client, swarm, replacement)
    return Card(
        seat=at.seat,
        execution_id=fenced.execution_id,
        failure=fenced.reason,
        fenced_at=fenced.fenced_at,
        reason=view.reason,
        checkpoint=view.checkpoint,
        resume_available=view.resume_available,
        resume_label=view.resume_label,
        continuity=continuity,
        decision=chosen.state.value if chosen else records.RECOVERY_PENDING,
        replacement_execution_id=replacement,
        refusal=refused,
    )


async def status(
    client: redis_link.Client, swarm: str, compatibility_key: str, reoffer: Reoffer | None = None
) -> SwarmStatus:
    """The swarm's status: tasks, seats, handoff cards, pause state and counters; the cards'
    offers under `compatibility_key` (see `card`)."""
    all_seats = await reading.seats(client, swarm)
    tasks, cards = [], []
    for at in all_seats:
        row = await reading.task(client, swarm, at.task_id)
        if row is not None:
            tasks.append(row)
        found = await card(client, swarm, at, compatibility_key, reoffer)
        if found is not None:
            cards.append(found)
    cfg = await reading.config(client, swarm)
    return SwarmStatus(
        swarm=swarm,
        paused=await reading.paused(client, swarm),
        automation=cfg.restore_automation if cfg else False,
        tasks=tuple(tasks),
        seats=tuple(all_seats),
        handoffs=tuple(cards),
        restore_outcomes_by_type=await reading.restore_outcomes_by_type(client, swarm),
        controller_epoch=await reading.epoch(client, swarm),
    )
