"""The resync: what a list of the runtime and the recorded state say needs work, by seat.

A resync reads, in one read-only script (`reading.before_listing`), the attempts the list
should show (`keys.expected`, read before the list so an attempt launched meanwhile is not
missing), the attention set sorted in Redis into seats with work left and seats that only await
their replacement's report, and the recorded decision requests; then it lists the runtime (the
watch's cache on Kubernetes). It records what the list showed of the expected attempts (one
write, and only when something changed) and returns, by seat, what was seen: a failed attempt,
an expected attempt missing, work left, a request, a Pod newer than the records know of its
seat and carrying the decision that admitted it (Redis lost that decision: `witnessing`). It
works on no seat: the seat queue does.

Seats the queue knows (`working.Session.known`: queued, being worked on, or worked since the
resync before) are not read again: their worker reads them, or has just reconciled them. What
the list showed of them is still brought to the queue, so a seat being worked is worked again
after with it; but not a Pod newer than the records (a witness): for a seat the queue knows
that is its own replacement not yet recorded as launched, and a later resync brings a real one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from services.controller import losses, observations, replacing
from services.controller.pods import runtime as pods
from services.controller.state import keys, reading, scripting, writing


async def resync(
    ctx: replacing.Context, scripts: scripting.Scripts, known: Iterable[str] = ()
) -> dict[str, observations.Seen]:
    """What the runtime's list and the recorded state say needs work, by seat.

    Raises:
        pods.PodsUnavailable: the runtime could not be listed.
        scripting.LeaseLost: the lease was lost (the record of the list was not written).
        losses.StateLost: Redis lost the swarm's state (nothing was written).
    """
    swarm = ctx.swarm
    known = set(known)
    reads = await reading.before_listing(scripts, swarm, known)
    listed = await ctx.runtime.list_attempts(swarm)
    listing = {a.execution_id: a for a in listed if a.swarm == swarm}
    # Before anything is written: a state Redis lost is not worked on as if it were all there.
    epoch = ctx.writer.lease.epoch or 0
    loss = losses.detect(swarm, known=reads.known, listed=listing.values(), epoch=epoch)
    if loss is not None:
        raise losses.StateLost(loss, listing.values())
    seen = observations.failures(swarm, listing.values(), watched=False)
    present = {e for e, a in listing.items() if not a.departed}
    await _note_listed(ctx.writer, reads.expected, listing, present)
    for eid, passes in reads.expected.items():
        if eid not in present and (name := keys.seat_of(eid)) is not None:
            seen.setdefault(name, observations.Seen()).missing[eid] = passes
    for name in reads.seats:
        # Attention seats with work left (a fence without a decision, a replacement not yet
        # launched, a lost Pod not yet removed); those only awaiting a report are left out.
        seen.setdefault(name, observations.Seen())
    for name, attempt in observations.unexpected_witnesses(
        swarm, listing.values(), reads.expected
    ).items():
        # A Pod newer than what the records expect of its seat: its decision may be lost.
        # Unless the queue knows the seat: then it is almost always the replacement its worker
        # just launched and has not recorded as launched yet (in a storm, most seats). A
        # resync that finds the seat outside the queue brings it if it still is one.
        if name not in known:
            seen.setdefault(name, observations.Seen()).witnessed = attempt
    for _, request in reads.requests:
        if (name := keys.seat_of(request.execution_id)) is not None:
            seen.setdefault(name, observations.Seen()).requests = True
    return seen


async def _note_listed(
    writer: writing.Writer,
    expected: Mapping[str, int],
    listing: Mapping[str, pods.Attempt],
    present: set[str],
) -> None:
    """Record what the list showed of the expected attempts: those listed again count from
    zero, those finished (exited 0) are expected no longer. Written only when something
    changed: a healthy resync writes nothing."""
    again = sorted(e for e, n in expected.items() if n > 0 and e in present)
    finished = sorted(
        e for e in expected if e in listing and listing[e].failure is None and not listing[e].alive
    )
    if again or finished:
        await writer.listed(again, finished)
