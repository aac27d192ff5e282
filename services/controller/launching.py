"""Launching an admitted attempt's Pod, and removing the fenced attempt's Pod after its
replacement launched.

A launch is idempotent by execution id and recorded after it happened: the runtime takes a
repeated launch (after a crash before the record) as done, and every pass launches each admitted
attempt not recorded as launched.
"""

from __future__ import annotations

import logging

from services.common import logs
from services.controller import pod_identities, releasing, replacing, witnesses
from services.controller.pods import runtime as pods
from services.controller.state import reading, records, transitions

log = logging.getLogger("services.controller.replacing")


def launch_spec(
    ctx: replacing.Context, execution: records.Execution, config: records.SwarmConfig
) -> pods.LaunchSpec:
    """What the runtime launches for an admitted attempt."""
    env = {
        "AGENTIHOOKS_SWARM": execution.swarm,
        "AGENTIHOOKS_SEAT": execution.seat,
        "AGENTIHOOKS_EXECUTION_ID": execution.execution_id,
        "AGENTIHOOKS_GENERATION": str(execution.generation),
        "AGENTIHOOKS_TASK_ID": execution.task_id,
        "AGENTIHOOKS_TASK_TEXT": execution.task_text,
        "AGENTIHOOKS_HARNESS": config.harness,
    }
    if execution.account:
        env["AGENTIHOOKS_PROVIDER_ACCOUNT"] = execution.account
    if config.checkpoint_remote:
        env["AGENTIHOOKS_CHECKPOINT_REMOTE"] = "true"
    return pods.LaunchSpec(
        swarm=execution.swarm,
        seat=execution.seat,
        execution_id=execution.execution_id,
        generation=execution.generation,
        image=execution.image or config.worker_image,
        # The entry point runs the restore first and then the swarm's command, which it reads
        # from the launch record; without one (tests) the command runs as it is.
        command=ctx.entry_point or tuple(config.command),
        worker_credential=replacing.worker_token(ctx.grant_key, execution),
        env=env,
        annotations={
            **witnesses.pod_annotations(execution),
            **pod_identities.pod_annotations(execution, ctx.writer.lease.epoch or 0),
        },
    )


async def launch(
    ctx: replacing.Context,
    execution: records.Execution,
    *,
    config: records.SwarmConfig | None = None,
    seat: records.Seat | None = None,
) -> bool:
    """Launch an admitted attempt's Pod unless recorded as launched; True when launched now.

    A refused replacement the pass relaunches is recorded as not launched again and comes
    through here like any other: the runtime creates its deleted worker again from the same
    spec (same directive, execution id, generation and credential). `config` and `seat` may be
    passed when the caller just read them (a large apply).
    """
    launched, _ = await launch_replacing(ctx, execution, None, config=config, seat=seat)
    return launched


async def launch_replacing(
    ctx: replacing.Context,
    execution: records.Execution,
    fence: records.Fence | None,
    *,
    config: records.SwarmConfig | None = None,
    seat: records.Seat | None = None,
) -> tuple[bool, records.Fence | None]:
    """`launch` the replacement of a fenced attempt, then remove the fenced attempt's Pod
    (unless the fence records it removed); returns whether it launched now and the fence as
    recorded now.

    The lost attempt's Pod goes after its replacement was launched, not before: with its
    authority released it can do nothing, and the replacement need not wait. When both happen
    here one write records both (the launch and the Pod's release). A crash before that write
    repeats both calls, which the runtime takes as done; a Pod the runtime could not remove is
    left to the next pass.
    """
    if execution.launched or execution.state is not records.ExecutionState.RUNNING:
        return False, await releasing.remove_pod(ctx, fence) if fence is not None else None
    config = config or await reading.config(ctx.client, ctx.swarm)
    seat = seat or await reading.seat(ctx.client, ctx.swarm, execution.seat)
    if config is None or seat is None:
        return False, await releasing.remove_pod(ctx, fence) if fence is not None else None
    await ctx.runtime.launch(launch_spec(ctx, execution, config))
    removing = fence is not None and not fence.released(records.ReleaseKind.POD)
    removed = removing and fence is not None and await releasing.remove(ctx, fence.execution_id)
    at = ctx.writer.now()
    status = await ctx.writer.launched(
        execution, seat, removed=fence.execution_id if removed and fence else None, at=at
    )
    if status is transitions.LaunchedStatus.LAUNCHED:
        # Logged by the call that recorded it: a pass racing the apply (or the watch) that
        # launched the same attempt finds it recorded (`already`) and says nothing.
        logs.event(
            log,
            "launched",
            swarm=ctx.swarm,
            seat=execution.seat,
            execution_id=execution.execution_id,
            generation=execution.generation,
        )
    if removed and fence is not None:
        fence = releasing.recorded(ctx, fence, [records.ReleaseKind.POD], at)
    return status is transitions.LaunchedStatus.LAUNCHED, fence


async def launch_or_defer(
    ctx: replacing.Context,
    execution: records.Execution,
    *,
    config: records.SwarmConfig | None = None,
    seat: records.Seat | None = None,
) -> None:
    """`launch`, leaving a launch the runtime refused now to the next recovery pass.

    The admission is recorded before this is called, and every pass launches each admitted
    attempt not recorded as launched, so a refusal here loses nothing.
    """
    try:
        await launch(ctx, execution, config=config, seat=seat)
    except pods.PodsError as exc:
        logs.event(
            log,
            "launch_failed",
            logging.WARNING,
            swarm=ctx.swarm,
            execution_id=execution.execution_id,
            exception=type(exc).__name__,
        )
