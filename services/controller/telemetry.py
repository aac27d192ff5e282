"""Fence, recovery and outcome events: a Redis stream and one JSON log line each.

The stream entry is written by the same Lua script as its transition (a transition without its
event, or an event without its transition, cannot happen); the script hands the fields back and
`log_events` writes the matching log line. Each event carries the expected and observed
generation and the controller epoch. Events never carry credentials or conversation content.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from services.common import logs, redis_link
from services.controller.state import keys, records

log = logging.getLogger("services.controller.telemetry")

KINDS = ("fence", "recovery", "outcome")


@dataclasses.dataclass(frozen=True)
class Event:
    """One telemetry event as stored in the swarm's stream."""

    id: str
    kind: str
    swarm: str
    seat: str
    execution_id: str
    expected_generation: int
    observed_generation: int
    controller_epoch: int
    detail: Mapping[str, Any]
    at: str

    @classmethod
    def from_fields(cls, event_id: str, fields: Mapping[str, Any]) -> Event:
        detail = fields.get("detail") or "{}"
        return cls(
            id=event_id,
            kind=str(fields["kind"]),
            swarm=str(fields["swarm"]),
            seat=str(fields["seat"]),
            execution_id=str(fields["execution_id"]),
            expected_generation=int(fields.get("expected_generation") or 0),
            observed_generation=int(fields.get("observed_generation") or 0),
            controller_epoch=int(fields.get("controller_epoch") or 0),
            detail=json.loads(detail) if isinstance(detail, str) else dict(detail),
            at=str(fields.get("at", "")),
        )

    def to_json(self) -> dict[str, Any]:
        # Field by field: `dataclasses.asdict` deep-copies, and this runs for every event.
        return {
            "id": self.id,
            "kind": self.kind,
            "swarm": self.swarm,
            "seat": self.seat,
            "execution_id": self.execution_id,
            "expected_generation": self.expected_generation,
            "observed_generation": self.observed_generation,
            "controller_epoch": self.controller_epoch,
            "detail": dict(self.detail),
            "at": self.at,
        }


def log_events(raw_events: Iterable[Mapping[str, Any]]) -> list[Event]:
    """Write one JSON log line per event a script reported; return the events."""
    out = []
    logging_on = log.isEnabledFor(logging.INFO)
    for raw in raw_events:
        event = Event.from_fields(str(raw["id"]), raw)
        out.append(event)
        if not logging_on:
            continue
        fields = event.to_json()
        fields["event_id"] = fields.pop("id")
        kind = fields.pop("kind")
        logs.event(log, kind, **fields)
    return out


def detail(**fields: Any) -> str:
    """An event's detail as JSON (None values left out)."""
    return json.dumps({k: v for k, v in fields.items() if v is not None}, sort_keys=True)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def read(
    client: redis_link.Client,
    swarm: str,
    *,
    after: str | None = None,
    block_ms: int | None = None,
    count: int = 100,
) -> list[Event]:
    """Events of the swarm after `after` (a stream id; None: only new ones when blocking,
    everything from the start otherwise), oldest first."""
    start = after or ("$" if block_ms is not None else "0-0")
    reply: Any = await client.xread({keys.events(swarm): start}, count=count, block=block_ms)
    out: list[Event] = []
    for _stream, entries in reply or []:
        for event_id, fields in entries:
            out.append(Event.from_fields(_text(event_id), records.text_hash(fields)))
    return out


async def last_id(client: redis_link.Client, swarm: str) -> str:
    """The id of the swarm's newest event, or `0-0` when there is none (watch from now on)."""
    reply: Any = await client.xrevrange(keys.events(swarm), count=1)
    if not reply:
        return "0-0"
    return _text(reply[0][0])
