"""What the steps of a replacement share: where checkpoints are listed, the swarm's `Context`,
and a new attempt with its worker credential.

The steps themselves are `releasing` (the fenced attempt's authority and Pod), `admitting` (a
decision accepted and its replacement admitted), `launching` (the replacement's Pod) and
`launch_records` (what the replacement fetches at start). Every step reads what is already
recorded and does only what is missing, so any of them can be repeated after a crash: a release
recorded in the fence is not done again, the replacement's execution id is deterministic (the
Lua script admits it once), and a launch is idempotent by execution id and recorded after it
happened.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol

from services.common import directives, redis_link, tokens
from services.common.checkpoints import storing, validation
from services.controller import deciding
from services.controller.pods import runtime as pods
from services.controller.state import keys, records, writing


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
