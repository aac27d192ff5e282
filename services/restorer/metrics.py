"""Restorer.metrics: restore outcomes by type, refusals as `refused/<reason>` (spec: Metrics).

"On the worker, Restorer.metrics counts outcomes and refusals under restore_outcomes_by_type,
with refusals as refused/<reason>." A reason that carries a cause after a colon (`source: …`,
`malformed directive: …`) is counted under its code alone (`refused/source`), so the counter
keys stay a small fixed set and never hold a cause's text.
"""

from __future__ import annotations

import threading

from services.common import directives

NAME = "restore_outcomes_by_type"
REFUSED_PREFIX = "refused/"


def refusal_key(reason: str) -> str:
    """The counter key of a refusal: `refused/<code>`, the part of the reason before `:`."""
    code = reason.split(":", 1)[0].strip() or "unknown"
    return REFUSED_PREFIX + code


class Metrics:
    """Counters of one restorer process; safe to read from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {kind.value: 0 for kind in directives.Continuity}

    def outcome(self, kind: directives.Continuity) -> None:
        """Count one delivered restore of continuity `kind`."""
        self._add(kind.value)

    def refused(self, reason: str) -> None:
        """Count one refused restore under `refused/<code>`."""
        self._add(refusal_key(reason))

    def _add(self, key: str) -> None:
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1

    def restore_outcomes_by_type(self) -> dict[str, int]:
        """A snapshot of the counters: `native`, `reconstructed`, `fresh`, `refused/<reason>`."""
        with self._lock:
            return dict(self._counts)
