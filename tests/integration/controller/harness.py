"""Test doubles and helpers for the controller core: a tiny in-memory PodRuntime, a checkpoint
source of fixed summaries, and a harness that applies a swarm and drives Recovery on real Redis."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import redis.asyncio as aioredis

from services.common import revocations, settings, tokens
from services.common.checkpoints import records as ckpt_records
from services.controller import deciding, recovering, replacing
from services.controller.pods import classifying
from services.controller.pods import runtime as pods
from services.controller.state import keys, records, scripting

GRANT_KEY = "k" * 48
IMAGE = "registry.local/agent-worker:1.4.2"
MASTER_SECRET = "master-credential-0123456789"
OTHER_SECRET = "other-master-credential-987654"
SWARM = "example"


def document(
    *,
    automation: bool = True,
    text: str = "build the thing",
    legacy: bool = False,
    masters: Sequence[tuple[str, str]] = (
        ("master@example-1", MASTER_SECRET),
        ("master@example-2", OTHER_SECRET),
    ),
    seats: Sequence[str] = ("eng-1", "eng-2"),
) -> dict[str, Any]:
    """A swarm document in its JSON form."""
    return {
        "swarm": SWARM,
        "worker_image": IMAGE,
        "harness": "claude_code",
        "command": ["claude", "--print"],
        "restore_automation": automation,
        "projects": [{"name": "app", "repository": "https://git.example/app.git"}],
        "masters": [{"agent": a, "credential": c} for a, c in masters],
        "accounts": [{"name": "acct-a", "slots": 2}, {"name": "acct-b", "slots": 1}],
        "seats": [
            {
                "seat": s,
                "legacy_spawn": legacy,
                "task": {"id": f"t-{s}", "text": f"{text} ({s})", "awaiting": "worker"},
            }
            for s in seats
        ],
    }


class FakeRuntime:
    """The PodRuntime contract in memory: launches and removals are idempotent and counted; a
    launch creates a worker that does not exist now (deleted from outside), never a removed one."""

    def __init__(self) -> None:
        self.attempts: dict[str, pods.Attempt] = {}
        self.specs: dict[str, pods.LaunchSpec] = {}
        self.launch_calls: list[str] = []
        self.remove_calls: list[str] = []
        self.removed: set[str] = set()
        self.fail_launch = False
        self.fail_remove = False
        self.after_effect: scripting.AfterWrite | None = None

    async def list_attempts(self, swarm: str) -> list[pods.Attempt]:
        return [a for a in self.attempts.values() if a.swarm == swarm]

    async def watch(self, swarm: str) -> AsyncIterator[pods.Change]:
        yield pods.Change(relist=True)
        await asyncio.Event().wait()

    async def launch(self, spec: pods.LaunchSpec) -> None:
        self.launch_calls.append(spec.execution_id)
        if self.fail_launch:
            raise pods.PodsUnavailable("no cluster")
        existing = self.attempts.get(spec.execution_id)
        if (existing is not None and not existing.departed) or spec.execution_id in self.removed:
            return
        self.specs[spec.execution_id] = spec
        self.attempts[spec.execution_id] = pods.Attempt(
            spec.swarm,
            spec.seat,
            spec.execution_id,
            spec.generation,
            None,
            True,
            witness=spec.annotations.get(pods.ANNOTATION_DECISION),
            identity=spec.annotations.get(pods.ANNOTATION_ATTEMPT),
        )
        if self.after_effect is not None:
            self.after_effect("runtime:launch", {})

    async def remove(self, swarm: str, execution_id: str) -> None:
        self.remove_calls.append(execution_id)
        if self.fail_remove:
            raise pods.PodsUnavailable("no cluster")
        self.removed.add(execution_id)
        self.attempts.pop(execution_id, None)
        if self.after_effect is not None:
            self.after_effect("runtime:remove", {})

    async def aclose(self) -> None:
        return None

    def fail(self, execution_id: str, reason: str = "oom_killed", *, alive: bool = False) -> None:
        a = self.attempts[execution_id]
        self.attempts[execution_id] = dataclasses.replace(
            a, failure=classifying.FailureReason(reason), alive=alive
        )

    def finish(self, execution_id: str) -> None:
        """The worker exited 0: no failure, no longer running."""
        a = self.attempts[execution_id]
        self.attempts[execution_id] = dataclasses.replace(a, failure=None, alive=False)

    def delete(self, execution_id: str) -> None:
        """The worker is deleted from outside the runtime and forgotten (`kubectl delete pod`
        seen by a restarted controller, a node drain, a local attempt folder deleted)."""
        del self.attempts[execution_id]

    def depart(self, execution_id: str) -> None:
        """The worker is deleted from outside and the runtime lists the final state it
        remembers (a Kubernetes watch saw the deletion): departed, not alive, and failed
        unless it had finished."""
        a = self.attempts[execution_id]
        finished = a.failure is None and not a.alive
        failure = None if finished else a.failure or classifying.FailureReason.APPLICATION_EXIT
        self.attempts[execution_id] = dataclasses.replace(
            a, failure=failure, alive=False, departed=True
        )


class WatchedRuntime(FakeRuntime):
    """The fake runtime with a watch the test feeds (`changes`); it asks for a resync first."""

    def __init__(self) -> None:
        super().__init__()
        self.changes: asyncio.Queue[pods.Change] = asyncio.Queue()

    async def watch(self, swarm: str) -> AsyncIterator[pods.Change]:
        yield pods.Change(relist=True)
        while True:
            yield await self.changes.get()


def summary(
    checkpoint_id: str,
    *,
    native: bool = True,
    session: str | None = "sess-1",
    watermark: int | None = 412,
    key: str = IMAGE,
    sequence: int = 7,
    execution_generation: int = 1,
) -> ckpt_records.Summary:
    return ckpt_records.Summary(
        checkpoint_id=checkpoint_id,
        continuity="native" if native else "context_only",
        compatibility_key=key,
        native_session_id=session if native else None,
        watermark=watermark,
        sequence=sequence,
        created_at="2026-12-02T15:00:00Z",
        task_generation=1,
        execution_generation=execution_generation,
        project="app",
    )


class FakeCheckpoints:
    """Complete checkpoints per fenced execution id, filtered by compatibility key."""

    def __init__(self) -> None:
        self.by_execution: dict[str, list[ckpt_records.Summary]] = {}
        self.calls = 0

    async def newest_compatible(
        self, scope: records.AttemptScope, compatibility_key: str
    ) -> Sequence[deciding.Checkpoint]:
        self.calls += 1
        found = [
            s
            for s in self.by_execution.get(scope.execution_id, [])
            if s.compatibility_key == compatibility_key
        ]
        return sorted(found, key=ckpt_records.Summary.newness, reverse=True)


class Crash(BaseException):
    """A simulated SIGKILL: not an Exception, so nothing in the core catches it."""


class CrashAfter:
    """A hook that raises `Crash` right after the Nth effect (a guarded script that ran on
    Redis, or a runtime launch/remove), and tallies every effect's outcome."""

    def __init__(self, n: int | None = None) -> None:
        self.n = n
        self.count = 0
        self.done: collections.Counter[str] = collections.Counter()

    def __call__(self, name: str, reply: Mapping[str, Any]) -> None:
        self.count += 1
        self.done[
            ":".join(str(p) for p in (name, reply.get("kind", ""), reply.get("status", "")))
        ] += 1
        if self.n is not None and self.count == self.n:
            raise Crash(name)


@dataclasses.dataclass
class Harness:
    client: aioredis.Redis
    runtime: FakeRuntime
    checkpoints: FakeCheckpoints
    recovery: recovering.Recovery

    async def worker(self, execution_id: str) -> records.Worker:
        """The principal of an attempt calling with its own credential (checked for real)."""
        token = self.runtime.specs[execution_id].worker_credential
        cred = await tokens.check_worker_credential(
            GRANT_KEY, token, revocations.RedisRevocations(self.client)
        )
        return records.Worker(cred)

    def master(
        self, agent: str = "master@example-1", secret: str = MASTER_SECRET
    ) -> records.Master:
        return records.Master(SWARM, agent, tokens.hash_secret(secret))

    async def restart(
        self, hook: scripting.AfterWrite | None = None, *, worker_image: str = IMAGE
    ) -> recovering.Recovery:
        """A new controller process: new Recovery, new holder; takes the lease when free.
        `worker_image` is the new process's AGENTIHOOKS_WORKER_IMAGE."""
        await self.client.delete(keys.lease(SWARM))
        self.recovery = new_recovery(
            self.client, self.runtime, self.checkpoints, hook=hook, worker_image=worker_image
        )
        assert await self.recovery.lease.acquire()
        return self.recovery


def new_recovery(
    client: aioredis.Redis,
    runtime: FakeRuntime,
    checkpoints: FakeCheckpoints | None,
    *,
    hook: scripting.AfterWrite | None = None,
    ttl_ms: int = 10_000,
    worker_image: str = IMAGE,
    redis_wait: settings.RedisWait | None = None,
) -> recovering.Recovery:
    source: replacing.CheckpointSource | None = checkpoints
    return recovering.Recovery(
        client,
        SWARM,
        runtime,
        grant_key=GRANT_KEY,
        worker_image=worker_image,
        checkpoints=source,
        scripts=scripting.Scripts(client, after_write=hook),
        lease_ttl_ms=ttl_ms,
        redis_wait=redis_wait,
    )


async def start(
    client: aioredis.Redis,
    *,
    checkpoints: bool = True,
    redis_wait: settings.RedisWait | None = None,
    **doc: Any,
) -> Harness:
    """Apply the swarm under a fresh controller's lease; every seat's first attempt launched.
    `redis_wait`: how durable the controller's acknowledged writes must be (none by default)."""
    runtime = FakeRuntime()
    source = FakeCheckpoints()
    recovery = new_recovery(client, runtime, source if checkpoints else None, redis_wait=redis_wait)
    assert await recovery.lease.acquire()
    await recovery.apply_swarm(document(**doc))
    return Harness(client, runtime, source, recovery)


def first(seat: str) -> str:
    return keys.execution_id(SWARM, seat, 1)


def second(seat: str) -> str:
    return keys.execution_id(SWARM, seat, 2)
