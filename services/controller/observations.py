"""What recovery work saw and did: `Seen` (what the runtime showed of a seat, and what was asked
of it, since a worker last took it) and `PassReport` (what a pass, or the work on some seats,
did). Plain data: no I/O."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from services.controller.pods import runtime as pods
from services.controller.state import records


@dataclasses.dataclass
class PassReport:
    """What a pass, or the work on some seats, did (for logs, metrics and tests)."""

    standby: bool = False
    lease_lost: bool = False
    fenced: list[str] = dataclasses.field(default_factory=list)
    pending: list[str] = dataclasses.field(default_factory=list)
    accepted: list[str] = dataclasses.field(default_factory=list)
    launched: list[str] = dataclasses.field(default_factory=list)
    held: list[str] = dataclasses.field(default_factory=list)
    """Failed replacements left alone because they reported a restore refusal."""
    missing: list[str] = dataclasses.field(default_factory=list)
    """Expected attempts the runtime's list did not show (counted towards `MISSING_PASSES`)."""
    relaunched: list[str] = dataclasses.field(default_factory=list)
    """Refused replacements whose deleted worker is launched again."""
    restored: list[str] = dataclasses.field(default_factory=list)
    """Replacements whose lost decision was written back from their worker (`witnessing`)."""
    watched: bool = False
    """Work on seats the watch saw fail (no listing), not a listing pass."""
    queued: bool = False
    """Work on seats no pass or watch brought (a retry after an error, a recorded request):
    neither a listing pass nor a watch's recovery."""
    requests_applied: int = 0
    requests_refused: int = 0
    errors: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    def add(self, other: PassReport) -> None:
        """Count what `other` (the work on one seat) did as done by this report's pass too."""
        self.fenced += other.fenced
        self.pending += other.pending
        self.accepted += other.accepted
        self.launched += other.launched
        self.held += other.held
        self.missing += other.missing
        self.relaunched += other.relaunched
        self.restored += other.restored
        self.errors += other.errors
        self.requests_applied += other.requests_applied
        self.requests_refused += other.requests_refused
        self.lease_lost = self.lease_lost or other.lease_lost


@dataclasses.dataclass(frozen=True)
class Admitted:
    """A replacement a decision call admitted just now, as the accept script wrote it (with
    the fence it replaces, its seat and the swarm's config): what the seat's worker launches
    with nothing read again."""

    fence: records.Fence
    replacement: records.Execution
    seat: records.Seat
    config: records.SwarmConfig | None


@dataclasses.dataclass
class Seen:
    """What the runtime showed of a seat (and what was asked of it) since a worker last took it.

    Attributes:
        failed: The newest failed attempt the watch or a list showed.
        watched: The failure came from the watch (the worker's own status): it is fenced with
            nothing read first; the fence script checks that it is the seat's current attempt.
        missing: Expected attempts of the seat a list did not show -> passes counted so far.
        requests: A decision request for the seat may be recorded.
        witnessed: The newest listed attempt of the seat that carries the decision admitting
            it (its Pod's annotation) and that the records do not expect: Redis may have lost
            that decision, which the worker then writes back first (`witnessing`).
        admitted: The replacement a decision call just admitted (`Admitted`). Alone, the
            worker launches it from what the accept script returned; with anything else seen,
            the seat is read and worked as usual.
    """

    failed: pods.Attempt | None = None
    watched: bool = False
    missing: dict[str, int] = dataclasses.field(default_factory=dict)
    requests: bool = False
    witnessed: pods.Attempt | None = None
    admitted: Admitted | None = None

    def merge(self, newer: Seen) -> None:
        """Add what was seen later: the newest failure wins (the watch's when both showed it)."""
        if newer.failed is not None:
            kept = self.failed
            if kept is None or newer.failed.generation > kept.generation:
                self.failed, self.watched = newer.failed, newer.watched
            elif newer.failed.execution_id == kept.execution_id:
                self.watched = self.watched or newer.watched
        self.missing.update(newer.missing)
        self.requests = self.requests or newer.requests
        if newer.witnessed is not None and (
            self.witnessed is None or newer.witnessed.generation >= self.witnessed.generation
        ):
            self.witnessed = newer.witnessed
        if newer.admitted is not None and (
            self.admitted is None
            or newer.admitted.replacement.generation >= self.admitted.replacement.generation
        ):
            self.admitted = newer.admitted

    def covers(self, other: Seen) -> bool:
        """Whether `other` shows nothing this does not: the same failed attempt (or none), no
        other missing attempt, no request this lacks."""
        if other.failed is not None and (
            self.failed is None or self.failed.execution_id != other.failed.execution_id
        ):
            return False
        if other.witnessed is not None and (
            self.witnessed is None or self.witnessed.execution_id != other.witnessed.execution_id
        ):
            return False
        if other.admitted is not None and (
            self.admitted is None
            or self.admitted.replacement.execution_id != other.admitted.replacement.execution_id
        ):
            return False
        return other.missing.keys() <= self.missing.keys() and (self.requests or not other.requests)

    def retry(self) -> Seen:
        """What a retry after a failed step keeps: the failure and the requests (a missing
        attempt was counted already; the next list counts it again; an admission is read
        again, as it may have moved on)."""
        return Seen(
            failed=self.failed,
            watched=self.watched,
            requests=self.requests,
            witnessed=self.witnessed,
        )

    @property
    def needs_read(self) -> bool:
        """Whether the worker reads the seat first: all but a failure the watch saw (fenced
        first) and a replacement a decision call admitted (`launches_admitted`)."""
        if self.witnessed is not None:
            return True
        if self.failed is not None:
            return not self.watched
        return not self.launches_admitted

    @property
    def launches_admitted(self) -> bool:
        """Whether the worker's work is only to launch the replacement a decision call just
        admitted, from what its accept script returned."""
        return (
            self.admitted is not None
            and self.failed is None
            and self.witnessed is None
            and not self.missing
        )


def unexpected_witnesses(
    swarm: str, attempts: Iterable[pods.Attempt], expected: Iterable[str]
) -> dict[str, pods.Attempt]:
    """By seat, the newest listed running, healthy attempt that carries the decision admitting
    it and is newer than every attempt of its seat the records expect: a generation Redis may
    not know (its decision lost). A failed attempt is left out: a fenced replacement's Pod
    waits for its own replacement to launch before it is removed, so one that Redis knows
    would be brought again by every resync while its seat awaits a decision."""
    known: dict[str, int] = {}
    for eid in expected:
        seat, _, generation = eid.removeprefix(f"{swarm}.").rpartition(".")
        if generation.isdigit():
            known[seat] = max(known.get(seat, 0), int(generation))
    newest: dict[str, pods.Attempt] = {}
    for attempt in attempts:
        if (
            attempt.swarm != swarm
            or attempt.witness is None
            or attempt.departed
            or not attempt.alive
            or attempt.failure is not None
            or attempt.generation <= known.get(attempt.seat, 0)
        ):
            continue
        seen = newest.get(attempt.seat)
        if seen is None or attempt.generation > seen.generation:
            newest[attempt.seat] = attempt
    return newest


def failures(swarm: str, attempts: Iterable[pods.Attempt], *, watched: bool) -> dict[str, Seen]:
    """What a watch or a list showed failed, by seat: each seat's newest failed attempt (a
    superseded one still shown, such as a Pod kept Terminating by a finalizer, must not hide a
    failure of the current one). Attempts of other swarms are left out."""
    newest: dict[str, pods.Attempt] = {}
    for attempt in attempts:
        seen = newest.get(attempt.seat)
        if (
            attempt.swarm == swarm
            and attempt.failure is not None
            and (seen is None or attempt.generation > seen.generation)
        ):
            newest[attempt.seat] = attempt
    return {seat: Seen(failed=attempt, watched=watched) for seat, attempt in newest.items()}
