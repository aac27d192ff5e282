"""Release, replace and launch: the steps the recovery pass and the decision calls share.

Every step reads what is already recorded and does only what is missing, so any of them can be
repeated after a crash: a release recorded in the fence is not done again, the replacement's
execution id is deterministic (the Lua script admits it once), and a launch is idempotent by
execution id and recorded after it happened.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from services.common import directives, errors, logs, redis_link, tokens
from services.common.checkpoints import storing, validation
from services.controller import authorizing, deciding, policy, telemetry, witnesses
from services.controller.pods import runtime as pods
from services.controller.state import keys, reading, records, writing

log = logging.getLogger("services.controller.replacing")


class CheckpointSource(Protocol):
    """Where the controller lists a fenced attempt's checkpoints."""

    async def newest_compatible(
        self, scope: records.AttemptScope, compatibility_key: str
    ) -> Sequence[deciding.Checkpoint]:
        """The attempt's complete, verified checkpoints captured under `compatibility_key`,
        newest first. Deciding reads no further than the first one that holds a conversation
        record (`deciding.usable`), so a source may list just that one."""
        ...


class NoCheckpoints:
    """No checkpoint store is configured: the controller lists no checkpoints, so every
    failure waits for a decision and only fresh succeeds."""

    async def newest_compatible(
        self, scope: records.AttemptScope, compatibility_key: str
    ) -> Sequence[deciding.Checkpoint]:
        return []


class BackendCheckpoints:
    """Checkpoints listed from a storage backend, verified object by object.

    Only the checkpoint a decision would pick is verified: the newest usable one (holding a
    conversation record) that passes, found by `validation.newest_verified`. Listed alone, it
    leads `deciding` to the same offer and directive as the whole verified list would.

    Args:
        backend: The configured backend (`checkpoints.backends.open_backend`).
    """

    def __init__(self, backend: storing.Backend) -> None:
        self._backend = backend

    async def newest_compatible(
        self, scope: records.AttemptScope, compatibility_key: str
    ) -> Sequence[deciding.Checkpoint]:
        store = self._backend.scoped(
            storing.StoreScope(scope.swarm, scope.task_id, scope.task_generation)
        )
        found = await validation.newest_verified(
            store,
            compatibility_key,
            scope.execution_generation,
            lambda summary: deciding.holds_conversation(summary.watermark),
        )
        return [] if found is None else [found]


@dataclasses.dataclass(frozen=True)
class Context:
    """What the steps need, for one swarm.

    Attributes:
        client: Redis (reads).
        writer: The swarm's writer (every write, under the lease).
        runtime: Where workers run.
        checkpoints: Where checkpoints are listed.
        grant_key: The key grants and worker credentials are signed with.
        worker_image: The controller's current worker image: the compatibility key.
        store_addr: The checkpoint-store address written into launch records.
        entry_point: The worker entry point launched in place of the swarm's command, if any.
    """

    client: redis_link.Client
    writer: writing.Writer
    runtime: pods.PodRuntime
    checkpoints: CheckpointSource
    grant_key: str = dataclasses.field(repr=False)
    worker_image: str
    store_addr: str | None = None
    entry_point: tuple[str, ...] = ()

    @property
    def swarm(self) -> str:
        return self.writer.swarm


def new_execution(
    *,
    swarm: str,
    seat: str,
    generation: int,
    task_id: str,
    task_generation: int,
    image: str,
    directive: directives.Directive,
    restores_from: records.Fence | None,
    legacy_spawn: bool,
    now: float,
    admission: records.Admitted | None = None,
) -> records.Execution:
    """A new attempt with fresh token ids (only ids are kept; tokens are minted from them).
    A replacement records the decision that `admission` names: its Pod carries it."""
    return records.Execution(
        execution_id=records.ExecutionId(keys.execution_id(swarm, seat, generation)),
        swarm=swarm,
        seat=records.SeatName(seat),
        generation=generation,
        task_id=task_id,
        task_generation=task_generation,
        image=image,
        state=records.ExecutionState.RUNNING,
        directive=directives.checked(directive),
        credential_id=tokens.new_token_id(),
        credential_issued_at=int(now),
        capture_grant_id=tokens.new_token_id(),
        restore_grant_id=tokens.new_token_id() if directive.checkpoint_id else None,
        restores_from_execution=restores_from.execution_id if restores_from else None,
        restores_from_generation=restores_from.generation if restores_from else 0,
        legacy_spawn=legacy_spawn,
        account=None,
        native_session_id=None,
        archive_watermark=None,
        captured_checkpoint_id=None,
        launched=False,
        admitted_at=writing.rfc3339(now),
        admission=admission,
    )


def worker_token(grant_key: str, execution: records.Execution) -> str:
    """The attempt's worker credential: the same token every time (same id and issue time)."""
    _, token = tokens.mint_worker_credential(
        grant_key,
        swarm=execution.swarm,
        seat=execution.seat,
        execution_id=execution.execution_id,
        execution_generation=execution.generation,
        ttl_s=writing.WORKER_CREDENTIAL_TTL_S,
        credential_id=execution.credential_id,
        now=execution.credential_issued_at,
    )
    return token


def launch_spec(
    ctx: Context, execution: records.Execution, config: records.SwarmConfig
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
        worker_credential=worker_token(ctx.grant_key, execution),
        env=env,
        annotations=witnesses.pod_annotations(execution),
    )


async def launch(
    ctx: Context,
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
    ctx: Context,
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
        return False, await remove_pod(ctx, fence) if fence is not None else None
    config = config or await reading.config(ctx.client, ctx.swarm)
    seat = seat or await reading.seat(ctx.client, ctx.swarm, execution.seat)
    if config is None or seat is None:
        return False, await remove_pod(ctx, fence) if fence is not None else None
    await ctx.runtime.launch(launch_spec(ctx, execution, config))
    removing = fence is not None and not fence.released(records.ReleaseKind.POD)
    removed = removing and fence is not None and await _remove(ctx, fence.execution_id)
    at = ctx.writer.now()
    status = await ctx.writer.launched(
        execution, seat, removed=fence.execution_id if removed and fence else None, at=at
    )
    if status == "launched":
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
        fence = _recorded(ctx, fence, [records.ReleaseKind.POD], at)
    return status == "launched", fence


async def launch_or_defer(
    ctx: Context,
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


async def release_authority(ctx: Context, fence: records.Fence) -> records.Fence:
    """Revoke the fenced attempt's grants and end its account slot, each once; return the
    fence as recorded now.

    The three are one script that records them in the fence with what they did: after a crash
    either all of them are recorded and skipped, or none is and all are done. What they revoke
    is read from the attempt's record by the script.

    Raises:
        errors.NotFound: the fenced attempt has no record (`execution_missing`).
    """
    todo = [kind for kind in records.AUTHORITY_RELEASES if not fence.released(kind)]
    if not todo:
        return fence
    eid = fence.execution_id
    at = ctx.writer.now()
    status = await ctx.writer.release(eid, todo, at=at)
    if status == "released":
        return _recorded(ctx, fence, todo, at)
    if status == "execution_missing":
        raise errors.NotFound("execution_missing", "the fenced attempt has no record")
    return await reading.fence(ctx.client, ctx.swarm, eid) or fence


def _recorded(
    ctx: Context, fence: records.Fence, kinds: Sequence[records.ReleaseKind], at: str
) -> records.Fence:
    """The fence with `kinds` recorded as released at `at`, as the release script just wrote
    them: no read back. (A kind another caller, a decision call, recorded meanwhile would show
    our time in this copy only, not in Redis.)"""
    done = tuple(records.Release(kind, at, ctx.writer.lease.epoch or 0) for kind in kinds)
    return dataclasses.replace(fence, releases=fence.releases + done)


async def remove_pod(ctx: Context, fence: records.Fence) -> records.Fence:
    """Remove the fenced attempt's Pod unless the fence records it removed; return the fence
    as recorded now. A Pod the runtime could not remove is retried on the next pass."""
    if fence.released(records.ReleaseKind.POD):
        return fence
    eid = fence.execution_id
    if not await _remove(ctx, eid):
        return fence
    at = ctx.writer.now()
    if await ctx.writer.release(eid, [records.ReleaseKind.POD], at=at) == "released":
        return _recorded(ctx, fence, [records.ReleaseKind.POD], at)
    return await reading.fence(ctx.client, ctx.swarm, eid) or fence


async def _remove(ctx: Context, eid: str) -> bool:
    """Remove a fenced attempt's Pod (nothing recorded); False when the runtime could not,
    logged."""
    try:
        await ctx.runtime.remove(ctx.swarm, eid)
    except pods.PodsError as exc:
        logs.event(
            log,
            "pod_remove_failed",
            logging.WARNING,
            swarm=ctx.swarm,
            execution_id=eid,
            exception=type(exc).__name__,
        )
        return False
    return True


@dataclasses.dataclass(frozen=True)
class Admission:
    """The answer of `admit`: the script's status, the decision as recorded afterwards, and
    when accepted now the replacement and its seat as written."""

    status: str
    decision: records.Decision | None
    replacement: records.Execution | None = None
    seat: records.Seat | None = None


def task_recovery_accepted(
    fence: records.Fence,
    decision_fields: Mapping[str, Any],
    directive: directives.Directive,
    replacement: records.Execution,
) -> dict[str, Any]:
    """The task's recovery field once a decision is accepted: the directive, status accepted."""
    return {
        "status": "accepted",
        **directive.to_json(),
        "choice": decision_fields["choice"],
        "fenced_execution_id": fence.execution_id,
        "execution_id": replacement.execution_id,
        "archive_watermark": fence.archive_watermark,
        "decided_at": decision_fields["decided_at"],
    }


async def admit(
    ctx: Context,
    fence: records.Fence,
    *,
    choice: records.Choice,
    directive: directives.Directive,
    source: records.DecisionSource,
    agent: str | None,
    automatic: bool,
    offer: records.Offer | None,
    request_field: str | None = None,
    config: records.SwarmConfig | None = None,
    read_back: bool = True,
) -> Admission:
    """Accept the decision and admit one replacement on the same seat, next generation.

    The Lua script is the arbiter: of many concurrent identical calls one is `accepted` and
    the rest are `repeated`; a different choice after acceptance is a `conflict`. `config`
    may be passed when the caller just read it; without `read_back` the answer carries no
    decision (the recovery pass needs only the status).
    """
    config = config or await reading.config(ctx.client, ctx.swarm)
    image = config.worker_image if config else ctx.worker_image
    now = ctx.writer.clock()
    admission = records.Admitted(
        choice=choice,
        source=source,
        agent=agent,
        decided_at=writing.rfc3339(now),
        # The script accepts only under this epoch (the lease check), so it is the one the
        # decision records.
        decision_epoch=ctx.writer.lease.epoch or 0,
        fence_reason=fence.reason,
        fence_epoch=fence.controller_epoch,
        fenced_at=fence.fenced_at,
        native_session_id=fence.native_session_id,
        archive_watermark=fence.archive_watermark,
        final_capture=fence.final_capture,
    )
    replacement = new_execution(
        swarm=ctx.swarm,
        seat=fence.seat,
        generation=fence.generation + 1,
        task_id=fence.task_id,
        task_generation=fence.task_generation,
        image=image,
        directive=directive,
        restores_from=fence,
        legacy_spawn=False,
        now=now,
        admission=admission,
    )
    fields: dict[str, str] = {
        "choice": choice.value,
        "source": source.value,
        "decided_at": writing.rfc3339(now),
        "replacement": replacement.execution_id,
        "replacement_generation": str(replacement.generation),
        **records.directive_fields(directive),
    }
    if agent:
        fields["agent"] = agent
    recovery = task_recovery_accepted(fence, fields, directive, replacement)
    detail = telemetry.detail(
        decision="accepted",
        choice=choice.value,
        source=source.value,
        agent=agent,
        directive=directive.to_json(),
        replacement_execution_id=replacement.execution_id,
    )

    async def accept() -> writing.Accepted:
        return await ctx.writer.accept(
            fence,
            choice=choice,
            decision=fields,
            replacement=replacement,
            task_recovery=recovery,
            automatic=automatic,
            request_field=request_field,
            detail=detail,
            offer=offer,
        )

    accepted = await accept()
    if accepted.status == "releasing":
        fence = await release_authority(ctx, fence)
        accepted = await accept()
    decided = (
        await reading.decision(ctx.client, ctx.swarm, fence.execution_id) if read_back else None
    )
    return Admission(accepted.status, decided, accepted.replacement, accepted.seat)


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


async def launch_record(ctx: Context, caller: records.Principal) -> LaunchRecord:
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
