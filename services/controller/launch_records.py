"""What an attempt launches with (`GetLaunchRecord`): its directive, registration, command and
the grants minted for it now. Only the seat's current attempt, with its own credential, gets it.
"""

from __future__ import annotations

import dataclasses

from services.common import directives, errors, tokens
from services.controller import authorizing, policy, replacing
from services.controller.state import reading, records


@dataclasses.dataclass(frozen=True)
class LaunchRecord:
    """What an attempt launches with (served by `GetLaunchRecord`)."""

    scope: records.AttemptScope
    directive: directives.Directive
    projects: tuple[records.Project, ...]
    worker_image: str
    harness: str
    restores_from_generation: int
    restore_grant: str | None = dataclasses.field(repr=False)
    capture_grant: str = dataclasses.field(repr=False)
    command: tuple[str, ...]
    checkpoint_remote: bool
    store_addr: str | None
    task_text: str
    continuation_prompt: str = ""


async def launch_record(ctx: replacing.Context, caller: records.Principal) -> LaunchRecord:
    """The calling attempt's launch record, with its grants minted now under their ids.

    The restore grant reads the fenced attempt's scope (for the restore); the capture grant
    writes the attempt's own scope. A fenced attempt gets nothing (forbidden_scope).
    """
    own = await authorizing.attempt(ctx.client, ctx.swarm, policy.Action.LAUNCH, caller)
    held = own.execution
    config = await reading.config(ctx.client, ctx.swarm)
    if config is None:
        raise errors.NotFound("swarm_missing", "the swarm is not declared")
    _, capture = tokens.mint_grant(
        ctx.grant_key,
        swarm=held.swarm,
        seat=held.seat,
        task_id=held.task_id,
        task_generation=held.task_generation,
        execution_id=held.execution_id,
        execution_generation=held.generation,
        # Read too: a capture verifies what it wrote through the same grant.
        rights=frozenset({tokens.Right.READ, tokens.Right.WRITE}),
        grant_id=held.capture_grant_id,
    )
    restore: str | None = None
    if held.restore_grant_id and held.restores_from_execution:
        _, restore = tokens.mint_grant(
            ctx.grant_key,
            swarm=held.swarm,
            seat=held.seat,
            task_id=held.task_id,
            task_generation=held.task_generation,
            execution_id=held.restores_from_execution,
            execution_generation=held.restores_from_generation,
            rights=frozenset({tokens.Right.READ}),
            grant_id=held.restore_grant_id,
        )
    return LaunchRecord(
        scope=held.scope,
        directive=held.directive,
        projects=config.projects,
        worker_image=held.image or config.worker_image,
        harness=config.harness,
        restores_from_generation=held.restores_from_generation,
        restore_grant=restore,
        capture_grant=capture,
        command=tuple(config.command),
        checkpoint_remote=config.checkpoint_remote,
        store_addr=ctx.store_addr,
        task_text=held.task_text,
        continuation_prompt=config.continuation_prompt,
    )
