"""The JSON bodies of the HTTP API's reads: a swarm's status (`GET /v1/swarms/{swarm}/status`,
the shape of `agentihooks swarm NAME status --json`) and the swarm panel's rows (`GET
/v1/swarms`). Pure: the routes read, these only shape.
"""

from __future__ import annotations

import collections
from typing import Any, Final

from services.common import directives
from services.controller.state import records, swarm_status


def role(caller: records.Principal) -> str:
    """Who the caller is, as the pages need to know it: what it may do follows from it."""
    if isinstance(caller, records.Operator):
        return "operator"
    return "master" if isinstance(caller, records.Master) else "worker"


def status(
    status: swarm_status.SwarmStatus, runtime: str, caller: records.Principal
) -> dict[str, Any]:
    """The status in the shape of `agentihooks swarm NAME status --json`, plus each card's
    fence time and restore refusal (the reason a replacement's restore stopped, if it did),
    and who the caller is (`operator` or `master`: the ledger offers unpausing to the
    operator only)."""
    return {
        "swarm": status.swarm,
        "paused": status.paused,
        "runtime": runtime,
        "caller": role(caller),
        "tasks": [
            {
                "task_id": t.task_id,
                "seat": t.seat,
                "text": t.text,
                "awaiting": t.awaiting,
                "recovery": dict(t.recovery) if t.recovery is not None else None,
            }
            for t in status.tasks
        ],
        "seats": [
            {
                "seat": s.seat,
                "execution_id": s.current_execution_id,
                "generation": s.generation,
                "state": s.state.value,
            }
            for s in status.seats
        ],
        "handoffs": [
            {
                "seat": c.seat,
                "execution_id": c.execution_id,
                "failure": c.failure,
                "fenced_at": c.fenced_at,
                "reason": c.reason,
                "checkpoint": c.checkpoint or None,
                "resume_available": c.resume_available,
                "resume_label": c.resume_label,
                "continuity": c.continuity,
                "decision": c.decision,
                "replacement_execution_id": c.replacement_execution_id or None,
                "refusal": c.refusal,
            }
            for c in status.handoffs
        ],
        "restore_outcomes_by_type": dict(status.restore_outcomes_by_type),
    }


CONTINUITY_COUNTED: Final = (
    *(c.value for c in directives.Continuity),
    swarm_status.PENDING_CONTINUITY,
)
"""What the swarm panel counts seats by: each fenced seat's card's continuity."""


def panel_row(status: swarm_status.SwarmStatus) -> dict[str, Any]:
    """A swarm in the swarm panel: paused or not, its seats counted by state, and by the
    continuity their card shows (native, reconstructed, fresh, or pending until the
    replacement reports; a seat never fenced has no card and is not counted there)."""
    states = collections.Counter(s.state.value for s in status.seats)
    continuity = collections.Counter(c.continuity for c in status.handoffs)
    return {
        "swarm": status.swarm,
        "paused": status.paused,
        "seats": len(status.seats),
        "states": {state.value: states[state.value] for state in records.SeatState},
        "continuity": {kind: continuity[kind] for kind in CONTINUITY_COUNTED},
    }
