"""Crash safety (DESIGN 3: "every step is idempotent and records that it happened, so a
controller killed between any two writes and restarted finishes the work without doing any of
it twice")."""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from services.common import directives
from services.controller.state import keys, reading, records
from tests.integration.controller import harness as h
from tests.integration.controller.harness import SWARM, first, second

Step = Callable[[h.Harness], Awaitable[Any]]


async def reconcile(hx: h.Harness) -> None:
    await hx.recovery.reconcile()


async def request_fresh(hx: h.Harness) -> None:
    await hx.recovery.request_restore_decision(
        "eng-1", records.Choice.FRESH, "master@example-1", hx.master()
    )


def report(continuity: directives.Continuity) -> Step:
    async def step(hx: h.Harness) -> None:
        if continuity is directives.Continuity.NATIVE:
            fields = {"checkpoint_id": "ckpt-7", "session_id": "sess-1", "watermark": 412}
        else:
            fields = {"checkpoint_id": None, "session_id": None, "watermark": None}
        await hx.recovery.report_restore(
            await hx.worker(second("eng-1")), recovery=continuity, **fields
        )  # type: ignore[arg-type]

    return step


SCENARIOS: dict[str, tuple[bool, list[Step], directives.Continuity]] = {
    "automatic native resume": (
        True,
        [reconcile, report(directives.Continuity.NATIVE)],
        directives.Continuity.NATIVE,
    ),
    "request applied next pass": (
        False,
        [reconcile, request_fresh, reconcile, report(directives.Continuity.FRESH)],
        directives.Continuity.FRESH,
    ),
}


async def prepare(client: aioredis.Redis, automation: bool) -> h.Harness:
    await client.flushall()
    hx = await h.start(client, automation=automation)
    await hx.recovery.report_capture(
        await hx.worker(first("eng-1")), native_session_id="sess-1", archive_watermark=400
    )
    hx.checkpoints.by_execution[first("eng-1")] = [h.summary("ckpt-7")]
    hx.runtime.fail(first("eng-1"))
    return hx


async def drive(hx: h.Harness, steps: list[Step], crash: h.CrashAfter) -> int:
    """Run the steps under a controller that crashes at `crash`; after a crash a new
    controller process (same tally, no further crash) takes over and retries the step.
    Returns the number of crashes."""
    await hx.restart(crash)
    hx.runtime.after_effect = crash
    steps = [*steps, reconcile]  # a last pass settles whatever is left
    crashes, i = 0, 0
    while i < len(steps):
        try:
            await steps[i](hx)
            i += 1
        except h.Crash:
            crashes += 1
            await hx.restart(crash)
    return crashes


async def count_effects(client: aioredis.Redis, automation: bool, steps: list[Step]) -> int:
    hx = await prepare(client, automation)
    counter = h.CrashAfter(None)
    await drive(hx, steps, counter)
    return counter.count


@pytest.mark.slow
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
async def test_crash_after_each_write_then_restart_does_everything_once(
    redis_client: aioredis.Redis, scenario: str
) -> None:
    """Issue 3 (crash test): interrupted after each distinct write of a recovery in turn (every
    Lua script and every runtime launch/remove) and restarted, every run ends with exactly one
    fence, each release done once, one decision, one replacement Pod, and the task's prior
    awaiting restored after the outcome."""
    automation, steps, continuity = SCENARIOS[scenario]
    total = await count_effects(redis_client, automation, steps)
    # fence (with its releases), accept, launch, Pod removed, launched (with the Pod's
    # release), outcome
    assert total >= 6
    for n in range(1, total + 1):
        hx = await prepare(redis_client, automation)
        crash = h.CrashAfter(n)
        crashes = await drive(hx, steps, crash)
        assert crashes == 1, n
        done = crash.done
        where = f"crash after effect {n} of {total}: {dict(done)}"
        fences = {key: n for key, n in done.items() if key.startswith("fence:")}
        assert sum(n for key, n in fences.items() if key.endswith(":fenced")) == 1, where
        # One script may record several releases ("release:launch_grant,store_grants,..."); the
        # fence records the authority releases it did the same way, and the replacement's
        # launch the Pod's release ("launched:pod").
        released = collections.Counter(
            kind
            for key, n in done.items()
            if key.startswith(("release:", "fence:", "launched:"))
            for kind in [k for k in key.split(":")[1].split(",") if k] * n
        )
        assert released == {kind.value: 1 for kind in records.ReleaseKind}, where
        assert done["accept::accepted"] == 1, where
        launches = {key: n for key, n in done.items() if key.startswith("launched:")}
        assert sum(n for key, n in launches.items() if key.endswith(":launched")) == 1, where
        assert done["outcome::stored"] == 1, where
        assert len(await hx.client.keys(keys.fence(SWARM, "*"))) == 1, where
        assert len(await hx.client.keys(keys.decision(SWARM, "*"))) == 1, where
        assert len(await hx.client.keys(keys.execution(SWARM, "*"))) == 3, where
        fence = await reading.fence(hx.client, SWARM, first("eng-1"))
        assert fence is not None and {r.kind for r in fence.releases} == set(records.ReleaseKind)
        replacements = [a for a in hx.runtime.attempts.values() if a.seat == "eng-1"]
        assert [a.execution_id for a in replacements] == [second("eng-1")], where
        d = await reading.decision(hx.client, SWARM, first("eng-1"))
        assert d is not None and d.state is records.DecisionState.ACCEPTED
        outcome = await reading.outcome(hx.client, SWARM, second("eng-1"))
        assert outcome is not None and outcome.recovery is continuity, where
        task = await reading.task(hx.client, SWARM, "t-eng-1")
        assert task is not None and task.awaiting == "worker" and not task.held, where
        assert await reading.requests(hx.client, SWARM) == [], where
        counts = await reading.restore_outcomes_by_type(hx.client, SWARM)
        assert counts[continuity.value] == 1, where
        fences = [e for e in await hx.recovery.events() if e.kind == "fence"]
        assert len(fences) == 1, where
        assert await reading.attention(hx.client, SWARM) == [], where
