"""The restore directive and its consistency rule (pure).

A directive has four fields: checkpoint_id, recovery (native, reconstructed or fresh), session_id
(set only for native) and watermark. A directive whose fields disagree is refused as malformed:
the controller never writes one and the restorer refuses one before anything else happens.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

MALFORMED = "malformed directive"


class Continuity(enum.StrEnum):
    """Which kind of continuity a replacement gets."""

    NATIVE = "native"
    RECONSTRUCTED = "reconstructed"
    FRESH = "fresh"


class DirectiveError(ValueError):
    """A directive whose fields disagree. The message names the disagreement, never values."""


@dataclasses.dataclass(frozen=True)
class Directive:
    """What a replacement launches with."""

    checkpoint_id: str | None
    recovery: Continuity
    session_id: str | None
    watermark: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "checkpoint_id": self.checkpoint_id,
            "recovery": self.recovery.value,
            "session_id": self.session_id,
            "watermark": self.watermark,
        }


def problem(d: Directive) -> str | None:
    """Why the directive's fields disagree, or None when they agree."""
    if d.recovery is Continuity.FRESH:
        if d.checkpoint_id:
            return "a fresh directive names a checkpoint"
        if d.session_id:
            return "a fresh directive names a session"
        if d.watermark is not None:
            return "a fresh directive names a watermark"
        return None
    if not d.checkpoint_id:
        return f"a {d.recovery.value} directive names no checkpoint"
    if d.watermark is None or d.watermark < 0:
        return f"a {d.recovery.value} directive has no watermark"
    if d.recovery is Continuity.NATIVE and not d.session_id:
        return "a native directive names no session"
    if d.recovery is Continuity.RECONSTRUCTED and d.session_id:
        return "a reconstructed directive names a session"
    return None


def checked(d: Directive) -> Directive:
    """Return `d` when its fields agree; raise DirectiveError otherwise."""
    why = problem(d)
    if why is not None:
        raise DirectiveError(why)
    return d


def from_json(raw: Mapping[str, Any]) -> Directive:
    """Parse and check a directive from its JSON form."""
    recovery = raw.get("recovery")
    if not isinstance(recovery, str):
        raise DirectiveError("unknown recovery kind")
    try:
        kind = Continuity(recovery)
    except ValueError:
        raise DirectiveError("unknown recovery kind") from None
    checkpoint_id = raw.get("checkpoint_id") or None
    session_id = raw.get("session_id") or None
    watermark = raw.get("watermark")
    if checkpoint_id is not None and not isinstance(checkpoint_id, str):
        raise DirectiveError("checkpoint_id is not text")
    if session_id is not None and not isinstance(session_id, str):
        raise DirectiveError("session_id is not text")
    if watermark is not None and (not isinstance(watermark, int) or isinstance(watermark, bool)):
        raise DirectiveError("watermark is not a whole number")
    return checked(Directive(checkpoint_id, kind, session_id, watermark))


FRESH = Directive(None, Continuity.FRESH, None, None)
