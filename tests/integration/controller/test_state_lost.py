"""Issue 23, "A loss is loud", at the controller core on a real redis-server with the fake
runtime: what a resync does when Redis lost a swarm's state. The controller as a process on the
Kubernetes API emulator, with Redis restarted empty, is tests/e2e/test_redis_lost.py."""

from __future__ import annotations

import dataclasses
import json

import pytest
import redis.asyncio as aioredis

from services.common import errors
from services.controller import losses, pod_identities
from services.controller.pods import runtime as pods
from services.controller.state import keys, reading, records
from tests.integration.controller import harness as h
from tests.integration.controller.harness import SWARM, first


def _launched_under(runtime: h.FakeRuntime, execution: str, epoch: int) -> None:
    """The worker of `execution` says it was launched under `epoch`."""
    attempt = runtime.attempts[execution]
    identity = pod_identities.read(attempt.identity)
    assert identity is not None
    value = json.loads(attempt.identity or "")
    value["epoch"] = epoch
    runtime.attempts[execution] = dataclasses.replace(attempt, identity=json.dumps(value))


async def test_every_worker_carries_its_epoch_and_token_ids(redis_client: aioredis.Redis) -> None:
    """The identity annotation: the lease epoch of the launch and the attempt's token ids."""
    hx = await h.start(redis_client)
    execution = await reading.execution(hx.client, SWARM, first("eng-1"))
    assert execution is not None
    identity = pod_identities.read(hx.runtime.attempts[first("eng-1")].identity)
    assert identity is not None
    assert identity.epoch == hx.recovery.lease.epoch
    assert identity.token_ids == pod_identities.TokenIds.of(execution)


async def test_redis_older_than_a_launch_takes_the_lease_past_it_and_goes_on(
    redis_client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker launched under epoch 5 while Redis's epoch says 1 (an older copy): the resync
    writes nothing, says `state_lost` (epoch_behind) once, takes the lease again past 5, clears
    the marker and says `state_recovered`; the seats are as they were."""
    hx = await h.start(redis_client)
    _launched_under(hx.runtime, first("eng-2"), 5)
    assert hx.recovery.lease.epoch == 1
    await hx.recovery.reconcile()
    assert hx.recovery.lease.epoch == 6
    assert await redis_client.get(keys.epoch(SWARM)) == b"6"
    assert hx.recovery.loss is None
    assert await redis_client.get(keys.state_lost(SWARM)) is None
    lines = [getattr(r, "fields", {}) for r in caplog.records]
    [lost] = [f for f in lines if f.get("event") == losses.REASON]
    assert (lost["kind"], lost["newest_epoch"], lost["epoch"]) == ("epoch_behind", 5, 1)
    assert [f["epoch"] for f in lines if f.get("event") == "state_recovered"] == [6]
    for seat in ("eng-1", "eng-2"):
        record = await reading.seat(redis_client, SWARM, seat)
        assert record is not None and record.state is records.SeatState.RUNNING
    report = await hx.recovery.reconcile()  # and on, under the new epoch
    assert not report.fenced and hx.recovery.loss is None


async def test_records_missing_while_workers_run_stop_the_swarm_until_applied_again(
    redis_client: aioredis.Redis,
) -> None:
    """Redis emptied under a holder: the resync writes nothing but the marker, the loss stays
    (status refused with `state_lost`, a failure not fenced) until the swarm is applied again,
    which adopts the running workers with the token ids they hold."""
    hx = await h.start(redis_client)
    before = await reading.execution(hx.client, SWARM, first("eng-1"))
    assert before is not None
    await redis_client.flushall()
    assert await hx.recovery.lease.acquire()
    await hx.recovery.reconcile()
    loss = hx.recovery.loss
    assert loss is not None and loss.kind is losses.Kind.RECORDS_MISSING and loss.pods == 2
    written = {k.decode() for k in await redis_client.keys("*")}
    assert written == {keys.lease(SWARM), keys.epoch(SWARM), keys.state_lost(SWARM)}
    with pytest.raises(errors.Unavailable) as refused:
        await hx.recovery.status()
    assert refused.value.reason == losses.REASON
    assert "agentihooks swarm apply" in refused.value.message
    hx.runtime.fail(first("eng-1"))
    report = await hx.recovery.reconcile()
    assert not report.fenced and hx.recovery.loss is not None
    assert {k.decode() for k in await redis_client.keys("*")} == written
    hx.runtime.attempts[first("eng-1")] = dataclasses.replace(
        hx.runtime.attempts[first("eng-1")], failure=None, alive=True
    )
    await hx.recovery.apply_swarm(h.document())
    await hx.recovery.reconcile()
    assert hx.recovery.loss is None
    assert await redis_client.get(keys.state_lost(SWARM)) is None
    adopted = await reading.execution(hx.client, SWARM, first("eng-1"))
    assert adopted is not None
    assert pod_identities.TokenIds.of(adopted) == pod_identities.TokenIds.of(before)
    status = await hx.recovery.status()
    assert {s.seat for s in status.seats} == {"eng-1", "eng-2"}


def test_a_loss_needs_a_running_worker_or_a_newer_epoch() -> None:
    """`losses.detect`: a swarm without records and without workers is a new swarm, not a
    loss; departed or finished workers do not count; an epoch at or below the lease's is
    normal."""

    def attempt(execution: str, *, epoch: int | None, alive: bool = True) -> pods.Attempt:
        identity = None
        if epoch is not None:
            ids = {"credential": "c", "credential_issued_at": 1, "capture_grant": "g"}
            identity = json.dumps({"version": 1, "epoch": epoch, "token_ids": ids})
        return pods.Attempt(SWARM, "eng-1", execution, 1, None, alive, identity=identity)

    assert losses.detect(SWARM, known=False, listed=[], epoch=1) is None
    finished = attempt("a", epoch=1, alive=False)
    assert losses.detect(SWARM, known=False, listed=[finished], epoch=1) is None
    running = attempt("a", epoch=3)
    missing = losses.detect(SWARM, known=False, listed=[running], epoch=1)
    assert missing is not None and missing.kind is losses.Kind.RECORDS_MISSING
    assert losses.detect(SWARM, known=True, listed=[running], epoch=3) is None
    behind = losses.detect(SWARM, known=True, listed=[running], epoch=2)
    assert behind is not None and (behind.kind, behind.newest_epoch) == (
        losses.Kind.EPOCH_BEHIND,
        3,
    )
    unannotated = attempt("b", epoch=None)
    assert losses.detect(SWARM, known=True, listed=[unannotated], epoch=1) is None


async def test_a_replica_that_lost_the_lease_no_longer_counts_the_loss(
    redis_client: aioredis.Redis,
) -> None:
    """The loss is the lease holder's to say: a replica that found it and then lost the lease
    (the marker stays, for `status`) is ready again as far as that swarm goes."""
    hx = await h.start(redis_client)
    await redis_client.flushall()
    assert await hx.recovery.lease.acquire()
    await hx.recovery.reconcile()
    assert hx.recovery.loss is not None
    await redis_client.delete(keys.lease(SWARM))
    other = h.new_recovery(redis_client, hx.runtime, None)
    assert await other.lease.acquire()
    assert not await hx.recovery.lease.renew()
    report = await hx.recovery.reconcile()
    assert report.standby and hx.recovery.loss is None
    assert await redis_client.get(keys.state_lost(SWARM)) is not None
