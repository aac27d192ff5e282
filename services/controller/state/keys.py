"""Every Redis key name of the controller, in one place.

All keys of one swarm share the hash tag `{SWARM}` (`agentihooks:{SWARM}:…`), so every multi-key
transition is one Lua script on one slot and the same code runs on Redis Cluster. The only keys
outside a swarm's slot are the index of swarm names, which no transition touches, and its
acknowledgement counter.
"""

from __future__ import annotations

import re

from services.common import revocations

SWARMS = "agentihooks:swarms"
"""A set of every applied swarm name (an index for readers; never part of a transition)."""

SWARMS_ACKS = "{agentihooks:swarms}:acks"
"""The acknowledgement counter of the swarm index: its hash tag is the index's whole name, so it
lies in the index's slot (`durable`)."""

_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,22}[a-z0-9])?")
NAME_PATTERN = _NAME.pattern
"""Swarm and seat names: DNS labels of at most 24 characters, so that an execution id
(`SWARM.SEAT.GENERATION`) still fits a Kubernetes label value (63 characters)."""


def is_name(value: object) -> bool:
    """True for a usable swarm or seat name."""
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def execution_id(swarm: str, seat: str, generation: int) -> str:
    """The deterministic execution id of a seat's attempt of one generation.

    A seat's generations are a line, so the id of generation N+1 is known before it is admitted:
    a controller that crashes and restarts cannot admit two replacements under different ids.
    Dots never occur in names, so the id also names its swarm.
    """
    return f"{swarm}.{seat}.{generation}"


def swarm_of(execution: str) -> str | None:
    """The swarm an execution id belongs to, or None when it is not one of ours."""
    parts = execution.split(".")
    if len(parts) != 3 or not is_name(parts[0]) or not is_name(parts[1]):
        return None
    if not parts[2].isdigit():
        return None
    return parts[0]


def seat_of(execution: str) -> str | None:
    """The seat an execution id belongs to, or None when it is not one of ours."""
    return execution.split(".")[1] if swarm_of(execution) is not None else None


def _p(swarm: str) -> str:
    return f"agentihooks:{{{swarm}}}"


def lease(swarm: str) -> str:
    """Who holds the swarm's controller lease (`SET … NX PX`)."""
    return f"{_p(swarm)}:lease"


def epoch(swarm: str) -> str:
    """The controller epoch, incremented on every lease acquisition."""
    return f"{_p(swarm)}:epoch"


def state_lost(swarm: str) -> str:
    """Set (JSON of the loss) while the holder finds the swarm's state lost (`losses`)."""
    return f"{_p(swarm)}:state-lost"


def paused(swarm: str) -> str:
    """The swarm's recovery-paused switch (spec: "Rollback")."""
    return f"{_p(swarm)}:recovery-paused"


def config(swarm: str) -> str:
    """Hash: the swarm's worker image, harness, command, projects and automation switch."""
    return f"{_p(swarm)}:config"


def masters(swarm: str) -> str:
    """Hash: master agent name -> SHA-256 of its credential (never the credential)."""
    return f"{_p(swarm)}:masters"


def accounts(swarm: str) -> str:
    """Hash: provider account -> how many attempt slots it has."""
    return f"{_p(swarm)}:accounts"


def slots(swarm: str) -> str:
    """Hash: execution id -> the provider account whose slot it holds."""
    return f"{_p(swarm)}:slots"


def slots_used(swarm: str) -> str:
    """Hash: provider account -> how many of its slots are held (kept beside `slots`)."""
    return f"{_p(swarm)}:slots-used"


def seats(swarm: str) -> str:
    """Sorted set of seat names, scored by their place in the swarm document."""
    return f"{_p(swarm)}:seats"


def attention(swarm: str) -> str:
    """Set of seats with unfinished work for the pass: added when a seat is admitted or its
    attempt is fenced, removed (by the settle script) once nothing is left to do, so a pass
    over a large healthy swarm reads almost nothing."""
    return f"{_p(swarm)}:attention"


def expected(swarm: str) -> str:
    """Hash: execution id -> how many consecutive passes the runtime's list did not show it
    (0 while it is listed), for every launched, current, unfenced attempt whose worker has not
    finished. Written when a launch is recorded, dropped when the attempt is fenced, finishes or
    is relaunched; the pass compares it with the runtime's list, so an attempt whose Pod
    vanished is noticed even on a seat off the attention set."""
    return f"{_p(swarm)}:expected"


def seat(swarm: str, name: str) -> str:
    """Hash: one seat (current attempt, generation, state, the attempt being recovered)."""
    return f"{_p(swarm)}:seat:{name}"


def task(swarm: str, task_id: str) -> str:
    """Hash: one ledger row (text, awaiting, recovery)."""
    return f"{_p(swarm)}:task:{task_id}"


def execution(swarm: str, execution: str) -> str:
    """Hash: one attempt (generation, scope, session, watermark, credential ids, directive)."""
    return f"{_p(swarm)}:execution:{execution}"


def fence(swarm: str, execution: str) -> str:
    """Hash: the one fence record of a lost attempt, with one field per release."""
    return f"{_p(swarm)}:fence:{execution}"


def decision(swarm: str, execution: str) -> str:
    """Hash: the decision for one fenced attempt."""
    return f"{_p(swarm)}:decision:{execution}"


def outcome(swarm: str, execution: str) -> str:
    """Hash: the verified restore outcome a replacement reported."""
    return f"{_p(swarm)}:outcome:{execution}"


def refusal(swarm: str, execution: str) -> str:
    """Hash: the last restore refusal a replacement reported."""
    return f"{_p(swarm)}:refusal:{execution}"


def requests(swarm: str) -> str:
    """Hash: recorded restore-decision requests, field `EXECUTION|CHOICE` (dedup by both)."""
    return f"{_p(swarm)}:requests"


def request_field(execution: str, choice: str) -> str:
    """The field of one request: requests are deduplicated by attempt and choice."""
    return f"{execution}|{choice}"


def outcomes_by_type(swarm: str) -> str:
    """Hash: restore_outcomes_by_type counters (native, reconstructed, fresh)."""
    return f"{_p(swarm)}:restore-outcomes"


def events(swarm: str) -> str:
    """Stream: fence, recovery and outcome telemetry events."""
    return f"{_p(swarm)}:events"


def acks(swarm: str) -> str:
    """A counter bumped by each acknowledgement that waits for the swarm's replicas
    (`durable`): the write on the confirming connection that its `WAIT` follows."""
    return f"{_p(swarm)}:acks"


def revoked(swarm: str, token_id: str) -> str:
    """A revoked token id, as `services.common.revocations` reads it."""
    return revocations.key(swarm, token_id)
