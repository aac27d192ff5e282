"""The calls of a swarm's recovery that pass straight through: its switches, and the calls the
API layer makes that are each one module's function over the swarm's context.

`Calls` is a base of `recovering.Recovery`, which holds what they use; each call that writes
returns once its write is durable (`acknowledging`). The calls that work through the seat queue
or the reconciler (a decision made now, the status with its card offers) are `Recovery`'s own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.common import directives, redis_link
from services.controller import (
    acknowledging,
    decisions,
    launch_records,
    outcomes,
    replacing,
    swarms,
    telemetry,
)
from services.controller.state import durable, reading, records, writing


class Calls:
    """The switches and pass-through calls of one swarm's recovery (see the module)."""

    client: redis_link.Client
    swarm: str
    ctx: replacing.Context
    durability: durable.Durability
    writer: writing.Writer

    # Switches.

    async def pause(self) -> None:
        """Set the swarm's recovery-paused key: failures are fenced and released but wait for
        an explicit decision. The switch survives a controller restart. Returns once the
        switch is durable (`acknowledging`)."""
        await self.writer.set_paused(True)
        await acknowledging.paused(self.durability, self.swarm, True)

    async def unpause(self) -> None:
        """Clear the swarm's recovery-paused key (returns once that is durable)."""
        await self.writer.set_paused(False)
        await acknowledging.paused(self.durability, self.swarm, False)

    async def paused(self) -> bool:
        return await reading.paused(self.client, self.swarm)

    # Calls the API layer makes.

    async def apply_swarm(self, document: str | Mapping[str, Any]) -> swarms.Applied:
        """Declare or update this swarm from a document (see `swarms.apply`); returns once the
        admission is durable (`acknowledging`)."""
        parsed = swarms.parse(document)
        applied = await swarms.apply(self.ctx, parsed)
        await acknowledging.admitted(self.durability, parsed)
        return applied

    async def request_restore_decision(
        self,
        execution_or_seat: str,
        choice: records.Choice,
        agent: str | None,
        caller: records.Principal,
    ) -> decisions.Recorded:
        """Only record the choice (see `decisions.request_restore_decision`): the spec has the
        next pass apply it, whose resync brings the seat to the queue with it."""
        return await decisions.request_restore_decision(
            self.ctx, execution_or_seat, choice, agent, caller
        )

    async def report_restore(
        self,
        caller: records.Principal,
        *,
        recovery: directives.Continuity,
        checkpoint_id: str | None,
        session_id: str | None,
        watermark: int | None,
    ) -> outcomes.Reported:
        """Store a replacement's outcome (see `outcomes.report_restore`); returns once the
        outcome is durable (`acknowledging`), a repeated one too."""
        reported = await outcomes.report_restore(
            self.ctx,
            caller,
            recovery=recovery,
            checkpoint_id=checkpoint_id,
            session_id=session_id,
            watermark=watermark,
        )
        await acknowledging.reported(self.durability, self.swarm, reported.outcome)
        return reported

    async def report_refusal(self, caller: records.Principal, reason: str) -> None:
        """Keep a replacement's restore refusal (see `outcomes.report_refusal`)."""
        await outcomes.report_refusal(self.ctx, caller, reason)

    async def report_capture(
        self,
        caller: records.Principal,
        *,
        native_session_id: str | None,
        archive_watermark: int | None,
        checkpoint_id: str | None = None,
        final: bool = False,
    ) -> None:
        """Record a running attempt's session and watermark (see `outcomes.report_capture`)."""
        await outcomes.report_capture(
            self.ctx,
            caller,
            native_session_id=native_session_id,
            archive_watermark=archive_watermark,
            checkpoint_id=checkpoint_id,
            final=final,
        )

    async def launch_record(self, caller: records.Principal) -> launch_records.LaunchRecord:
        """The calling attempt's launch record (see `launch_records.launch_record`)."""
        return await launch_records.launch_record(self.ctx, caller)

    async def restore_outcomes_by_type(self) -> dict[str, int]:
        """Verified outcomes counted as native, reconstructed and fresh."""
        return await outcomes.restore_outcomes_by_type(self.ctx)

    async def events(
        self, after: str | None = None, block_ms: int | None = None
    ) -> list[telemetry.Event]:
        """Fence, recovery and outcome events after a stream id (for `WatchRecovery`), once
        they are durable (`acknowledging`): a watcher, such as the CLI waiting for the pass
        that applies its request, is never shown a decision Redis may still lose."""
        found = await telemetry.read(self.client, self.swarm, after=after, block_ms=block_ms)
        if found:
            await acknowledging.shown(self.durability, self.swarm, found[-1].id)
        return found
