"""Applying a swarm document (issue 3, Swarms; DESIGN 2 ApplySwarm)."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from services.common import directives, errors
from services.controller.state import reading, records
from tests.integration.controller import harness as h
from tests.integration.controller.harness import SWARM, first, second
from tests.integration.controller.test_decisions import snapshot


async def test_apply_admits_generation_one_of_each_seat_and_launches_it(
    redis_client: aioredis.Redis,
) -> None:
    """Applying admits the first attempt of each new seat (generation 1) and launches it."""
    hx = await h.start(redis_client)
    assert sorted(hx.runtime.specs) == [first("eng-1"), first("eng-2")]
    spec = hx.runtime.specs[first("eng-1")]
    assert spec.generation == 1 and spec.image == h.IMAGE
    assert spec.command == ("claude", "--print")
    assert "eyJ" not in str(spec.env) and spec.env["AGENTIHOOKS_PROVIDER_ACCOUNT"] == "acct-a"
    seat = await reading.seat(redis_client, SWARM, "eng-1")
    assert seat is not None and (seat.generation, seat.state) == (1, records.SeatState.RUNNING)
    held = await reading.execution(redis_client, SWARM, first("eng-1"))
    assert held is not None and held.launched and held.directive == directives.FRESH
    # Two seats, three slots: acct-a holds both (first free account by name).
    assert await reading.slots(redis_client, SWARM) == {
        first("eng-1"): "acct-a",
        first("eng-2"): "acct-a",
    }
    assert await reading.swarm_names(redis_client) == [SWARM]


async def test_master_credentials_are_stored_only_as_hashes(redis_client: aioredis.Redis) -> None:
    """Masters: agent names bound to credentials, stored only as hashes."""
    await h.start(redis_client)
    everything = repr(await snapshot(redis_client))
    assert h.MASTER_SECRET not in everything and h.OTHER_SECRET not in everything
    masters = await reading.masters(redis_client, SWARM)
    assert set(masters) == {"master@example-1", "master@example-2"}


async def test_reapply_updates_text_and_masters_without_touching_attempts(
    redis_client: aioredis.Redis,
) -> None:
    """Re-applying updates task text and masters without touching running attempts."""
    hx = await h.start(redis_client)
    executions = {
        e: await reading.execution(redis_client, SWARM, e) for e in (first("eng-1"), first("eng-2"))
    }
    applied = await hx.recovery.apply_swarm(
        h.document(text="changed", masters=(("master@example-3", "a-brand-new-secret-1"),))
    )
    assert applied.admitted_executions == ()
    assert sorted(applied.updated_seats) == ["eng-1", "eng-2"]
    assert {e: await reading.execution(redis_client, SWARM, e) for e in executions} == executions
    task = await reading.task(redis_client, SWARM, "t-eng-1")
    assert task is not None and task.text == "changed (eng-1)"
    assert set(await reading.masters(redis_client, SWARM)) == {"master@example-3"}
    assert sorted(hx.runtime.launch_calls) == [first("eng-1"), first("eng-2")]


async def test_reapply_adds_a_new_seat(redis_client: aioredis.Redis) -> None:
    """A seat new to the document gets its first attempt; the others are untouched."""
    hx = await h.start(redis_client)
    applied = await hx.recovery.apply_swarm(h.document(seats=("eng-1", "eng-2", "eng-3")))
    assert applied.admitted_executions == (first("eng-3"),)
    assert first("eng-3") in hx.runtime.specs
    assert second("eng-1") not in hx.runtime.specs


async def test_a_seats_task_id_cannot_change(redis_client: aioredis.Redis) -> None:
    """The ledger row of a seat stays its row."""
    hx = await h.start(redis_client)
    doc = h.document()
    doc["seats"][0]["task"]["id"] = "t-other"  # type: ignore[index]
    with pytest.raises(errors.Malformed, match="task id"):
        await hx.recovery.apply_swarm(doc)


async def test_another_swarms_document_is_refused(hx: h.Harness) -> None:
    """A controller applies only its own swarm's document."""
    doc = h.document()
    doc["swarm"] = "other"
    with pytest.raises(errors.Malformed):
        await hx.recovery.apply_swarm(doc)


async def test_launch_failure_leaves_the_attempt_for_the_next_pass(
    redis_client: aioredis.Redis,
) -> None:
    """An admitted attempt the runtime could not launch is launched by the next pass."""
    runtime = h.FakeRuntime()
    runtime.fail_launch = True
    rec = h.new_recovery(redis_client, runtime, None)
    assert await rec.lease.acquire()
    await rec.apply_swarm(h.document())
    assert runtime.specs == {}
    runtime.fail_launch = False
    report = await rec.reconcile()
    assert sorted(report.launched) == [first("eng-1"), first("eng-2")]


async def test_the_continuation_prompt_reaches_each_launch_record(
    redis_client: aioredis.Redis,
) -> None:
    """The swarm's continuation prompt is stored with its config and carried by every attempt's
    launch record; a re-apply without it unsets it (the restorer's default applies)."""
    prompt = "The conversation was restored after a failure. Continue your task."
    doc = h.document()
    doc["continuation_prompt"] = prompt
    runtime, source = h.FakeRuntime(), h.FakeCheckpoints()
    rec = h.new_recovery(redis_client, runtime, source)
    assert await rec.lease.acquire()
    await rec.apply_swarm(doc)
    hx = h.Harness(redis_client, runtime, source, rec)
    config = await reading.config(redis_client, SWARM)
    assert config is not None and config.continuation_prompt == prompt
    for execution in (first("eng-1"), first("eng-2")):
        record = await rec.launch_record(await hx.worker(execution))
        assert record.continuation_prompt == prompt
    await rec.apply_swarm(h.document())
    config = await reading.config(redis_client, SWARM)
    assert config is not None and config.continuation_prompt == ""
    record = await rec.launch_record(await hx.worker(first("eng-1")))
    assert record.continuation_prompt == ""


@pytest.mark.parametrize("prompt", ["", "x" * 8193])
async def test_an_empty_or_too_long_continuation_prompt_is_refused(
    hx: h.Harness, prompt: str
) -> None:
    """The prompt, when set, has 1 to 8192 characters; nothing is written otherwise."""
    doc = h.document(text="changed")
    doc["continuation_prompt"] = prompt
    with pytest.raises(errors.Malformed) as caught:
        await hx.recovery.apply_swarm(doc)
    assert caught.value.reason == "malformed_document"
    assert "continuation_prompt" in caught.value.message
    task = await reading.task(hx.client, SWARM, "t-eng-1")
    assert task is not None and task.text != "changed (eng-1)"
