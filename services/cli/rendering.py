"""How the CLI shows status, decisions, events and errors (pure: messages in, text or JSON
out)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import types_pb2

CONTINUITY = {
    types_pb2.CONTINUITY_NATIVE: "native",
    types_pb2.CONTINUITY_RECONSTRUCTED: "reconstructed",
    types_pb2.CONTINUITY_FRESH: "fresh",
}
CHOICE = {types_pb2.CHOICE_RESUME: "resume", types_pb2.CHOICE_FRESH: "fresh"}


def _recovery(raw: str) -> Any:
    return json.loads(raw) if raw else None


def status_json(status: pb.SwarmStatus) -> dict[str, Any]:
    """The `--json` form: the same cards as the ledger page, under `handoffs`."""
    return {
        "swarm": status.swarm,
        "paused": status.paused,
        "runtime": status.runtime,
        "tasks": [
            {
                "task_id": t.task_id,
                "seat": t.seat,
                "text": t.text,
                "awaiting": t.awaiting,
                "recovery": _recovery(t.recovery_json),
            }
            for t in status.tasks
        ],
        "seats": [
            {
                "seat": s.seat,
                "execution_id": s.current_execution_id,
                "generation": s.generation,
                "state": s.state,
            }
            for s in status.seats
        ],
        "handoffs": [
            {
                "seat": h.seat,
                "execution_id": h.execution_id,
                "failure": h.failure,
                "reason": h.reason,
                "checkpoint": h.checkpoint or None,
                "resume_available": h.resume_available,
                "resume_label": h.resume_label,
                "continuity": h.continuity,
                "decision": h.decision,
                "replacement_execution_id": h.replacement_execution_id or None,
            }
            for h in status.handoffs
        ],
        "restore_outcomes_by_type": dict(status.restore_outcomes_by_type),
    }


def status_text(status: pb.SwarmStatus) -> str:
    """A screen an operator reads at a glance."""
    lines = [
        f"swarm {status.swarm}  runtime={status.runtime}  paused={'yes' if status.paused else 'no'}"
    ]
    lines.append("")
    lines.append(f"{'TASK':<16} {'SEAT':<10} {'AWAITING':<18} TEXT")
    for t in status.tasks:
        awaiting = "RECOVERY PENDING" if t.awaiting == "recovery_pending" else (t.awaiting or "-")
        lines.append(f"{t.task_id:<16} {t.seat:<10} {awaiting:<18} {t.text}")
    if status.handoffs:
        lines.append("")
        lines.append("Handoff outcomes")
        for h in status.handoffs:
            line = f"  {h.seat}: {h.reason}  [{h.decision}]"
            if h.decision == "recovery_pending":
                line += f"  offer: {h.resume_label if h.resume_available else 'fresh only'}"
            else:
                line += f"  replacement: {h.replacement_execution_id or '-'}"
            lines.append(f"{line}  continuity: {h.continuity}")
    counts = dict(status.restore_outcomes_by_type)
    lines.append("")
    lines.append(
        "restore outcomes: "
        + ", ".join(f"{k}={counts.get(k, 0)}" for k in ("native", "reconstructed", "fresh"))
    )
    return "\n".join(lines)


def decision_text(answer: pb.RestoreDecisionResponse) -> str:
    """One line: what was accepted and which replacement runs it."""
    d = answer.decision
    kind = CONTINUITY.get(d.directive.recovery, "?")
    checkpoint = f" from {d.directive.checkpoint_id}" if d.directive.checkpoint_id else ""
    again = " (already accepted)" if answer.repeated else ""
    return (
        f"{CHOICE.get(d.choice, '?')} accepted for {d.execution_id}{again}: {kind}{checkpoint}; "
        f"replacement {d.replacement_execution_id} (generation {d.replacement_generation})"
    )


def event_json(event: pb.RecoveryEvent) -> dict[str, Any]:
    """One event as a JSON object."""
    return {
        "id": event.id,
        "kind": event.kind,
        "swarm": event.swarm,
        "seat": event.seat,
        "execution_id": event.execution_id,
        "expected_generation": event.expected_generation,
        "observed_generation": event.observed_generation,
        "controller_epoch": event.controller_epoch,
        "detail": json.loads(event.detail_json) if event.detail_json else {},
        "at": event.at,
    }


SEATS_SHOWN = 20
"""How many seat names an error lists before it says how many more there are."""


def seat_names(status: pb.SwarmStatus, limit: int = SEATS_SHOWN) -> str:
    """The swarm's seats for an error about a seat that does not exist: at most `limit` names,
    then how many more."""
    names = [s.seat for s in status.seats]
    if not names:
        return f"swarm {status.swarm} has no seats"
    listed = ", ".join(names[:limit])
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return f"the seats of swarm {status.swarm} are {listed}{more}"


def accepted_decision(status: pb.SwarmStatus, attempt: str) -> str:
    """Which decision was accepted for a fenced attempt (`attempt`: its execution id, or its
    seat for the seat's latest fenced attempt), as a clause to add after a refusal; "" when
    none was accepted.

    The choice is the one on the task's recovery field; once the outcome replaced it there, it
    follows from the continuity (resume restores native or reconstructed, fresh is fresh).
    """
    for card in status.handoffs:
        if attempt not in (card.execution_id, card.seat) or card.decision != "accepted":
            continue
        choice = _choice_of(status, card.execution_id)
        text = f"{choice or 'a decision'} was accepted for {card.execution_id}"
        if card.replacement_execution_id:
            text += f", replacement {card.replacement_execution_id}"
        return text
    return ""


def _choice_of(status: pb.SwarmStatus, fenced: str) -> str:
    for task in status.tasks:
        recovery = _recovery(task.recovery_json)
        if not isinstance(recovery, dict) or recovery.get("fenced_execution_id") != fenced:
            continue
        if recovery.get("choice") in CHOICE.values():
            return str(recovery["choice"])
        continuity = recovery.get("recovery")
        if continuity == "fresh":
            return "fresh"
        if continuity in ("native", "reconstructed"):
            return "resume"
    return ""


REDACTED = "<redacted>"


def redacted(text: str, secrets: Iterable[str]) -> str:
    """`text` with every credential the CLI holds replaced, so that no error repeats one (a
    token pasted as an argument or an address comes back as `<redacted>`). A credential is
    also found as `repr` writes it, the way argparse quotes a value it refuses."""
    forms = {form for s in secrets if s for form in (s, repr(s)[1:-1])}
    for secret in sorted(forms, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text
