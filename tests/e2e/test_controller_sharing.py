"""Controllers share the swarms: real controller processes against one real Redis and the
Kubernetes API emulator.

Three replicas split the swarms evenly, each is ready (readiness means serving), swarms applied
after they started are found without a restart, a replica killed mid-way leaves its swarms to
the others within a bounded time, a replica joining takes its share, and a write that reaches a
replica without the swarm's lease is forwarded to the holder (gRPC and HTTP). Every failed
worker gets exactly one replacement throughout.
"""

from __future__ import annotations

import collections
import pathlib
import time
from collections.abc import AsyncIterator, Sequence

import pytest
import redis.asyncio as aioredis
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import types_pb2

from services.controller import sharing
from services.controller.state import keys, reading, records
from tests.e2e import kube_cluster
from tests.e2e import test_redis_outage as outage
from tests.support import controller_server as cs
from tests.support import ports
from tests.support.kube.apiserver import emulator as k8s_emulator
from tests.support.redis_server import RestartableRedis

WAIT_S = outage.WAIT_S
LEASE_MS = 2000


@pytest.fixture
async def redis(tmp_path: pathlib.Path) -> AsyncIterator[RestartableRedis]:
    server = RestartableRedis(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def holder_of(ctl: outage.Controller) -> str:
    return str(ctl.events("listening")[0]["holder"])


async def start_replicas(
    running: list[outage.Controller],
    count: int,
    tmp_path: pathlib.Path,
    emulator: k8s_emulator.K8sEmulator,
    url: str,
) -> dict[str, str]:
    """Start `count` controller processes (added to `running`); their environment."""
    env = outage.controller_env(tmp_path, emulator, url)
    env["AGENTIHOOKS_LEASE_MS"] = str(LEASE_MS)
    for _ in range(count):
        running.append(await outage.start_controller(env))
    return env


async def holders(client: aioredis.Redis, swarms: Sequence[str]) -> dict[str, str | None]:
    found = {}
    for swarm in swarms:
        raw = await client.get(keys.lease(swarm))
        found[swarm] = raw.decode() if raw is not None else None
    return found


async def split(
    client: aioredis.Redis, swarms: Sequence[str], running: Sequence[outage.Controller]
) -> collections.Counter[str]:
    """Wait until every swarm is held by one of `running`, each holding its fair share."""
    ids = {holder_of(c) for c in running}
    share = -(-len(swarms) // len(running))

    async def even() -> collections.Counter[str]:
        held = await holders(client, swarms)
        assert all(h in ids for h in held.values()), held
        counts = collections.Counter(h for h in held.values() if h is not None)
        assert set(counts) == ids and max(counts.values()) <= share, counts
        return counts

    return await ports.eventually(even, timeout=WAIT_S)


async def replaced_once(
    client: aioredis.Redis,
    emulator: k8s_emulator.K8sEmulator,
    swarms: Sequence[str],
    generation: int,
    deciders: Sequence[outage.Controller] = (),
) -> None:
    """Fail seat eng-1 of every swarm at `generation` and wait for exactly one replacement.

    A legacy spawn (generation 1) is replaced fresh without a choice; later failures wait for
    one, which the operator sends through `deciders` in turn (most of them not the holder: the
    call is forwarded)."""
    for swarm in swarms:
        outage.fail_pod(emulator, swarm, keys.execution_id(swarm, "eng-1", generation))
    for i, swarm in enumerate(swarms):
        lost = keys.execution_id(swarm, "eng-1", generation)
        if deciders:

            async def pending(s: str = swarm, e: str = lost) -> None:
                decision = await reading.decision(client, s, e)
                assert decision is not None, e
                assert decision.state is records.DecisionState.RECOVERY_PENDING, decision

            await ports.eventually(pending, timeout=WAIT_S)
            answer = await deciders[i % len(deciders)].stub.RestoreDecision(
                pb.RestoreDecisionRequest(
                    swarm=swarm, execution_id=lost, choice=types_pb2.CHOICE_FRESH
                ),
                metadata=cs.OPERATOR,
                timeout=WAIT_S,
            )
            assert not answer.repeated, answer
        await ports.eventually(
            lambda s=swarm: outage.launched(client, s, ("eng-1",), generation + 1),
            timeout=WAIT_S,
        )


def assert_pods_once(emulator: k8s_emulator.K8sEmulator, swarms: Sequence[str], top: int) -> None:
    """Each swarm has its seat's attempt of generation `top` as its only Pod (every earlier one
    released), and nothing more: no attempt launched twice or beyond."""
    for swarm in swarms:
        assert outage.pods_of(emulator, swarm) == [keys.execution_id(swarm, "eng-1", top)], swarm


async def test_three_controllers_split_the_swarms_take_over_from_a_killed_one_and_rebalance(
    tmp_path: pathlib.Path, redis: RestartableRedis
) -> None:
    """12 swarms applied after three replicas started are split 4/4/4 and every replica is
    ready; a failure in each swarm is replaced once. One replica is SIGKILLed: its swarms are
    taken over within a bounded time (printed) and split 6/6, and a failure in each is replaced
    once. A new replica joins: the swarms are split 4/4/4 again, with no Pod created twice."""
    swarms = [f"shard-{i:02d}" for i in range(12)]
    client = aioredis.Redis.from_url(redis.url)
    try:
        async with k8s_emulator.serving() as emulator, outage.controllers() as running:
            env = await start_replicas(running, 3, tmp_path, emulator, redis.url)
            for i, swarm in enumerate(swarms):
                doc = cs.document(swarm, seats=("eng-1",), legacy=True)
                await outage.apply(running[i % 3], doc)
            for swarm in swarms:
                await ports.eventually(
                    lambda s=swarm: outage.launched(client, s, ("eng-1",), 1), timeout=WAIT_S
                )
            counts = await split(client, swarms, running)
            assert sorted(counts.values()) == [4, 4, 4], counts
            for ctl in running:
                status, body = await ctl.readyz()
                assert status == 200, body
                assert await ctl.serving() == (outage.SERVING, outage.SERVING)
            await replaced_once(client, emulator, swarms, 1)

            victim = running[0]
            lost = [s for s, h in (await holders(client, swarms)).items() if h == holder_of(victim)]
            killed_at = time.monotonic()
            await victim.kill()
            survivors = running[1:]
            counts = await split(client, swarms, survivors)
            takeover_s = time.monotonic() - killed_at
            print(f"takeover after SIGKILL: {takeover_s:.1f} s (lease {LEASE_MS} ms)")
            assert sorted(counts.values()) == [6, 6], counts
            await replaced_once(client, emulator, lost, 2, survivors)
            others = [s for s in swarms if s not in lost]
            await replaced_once(client, emulator, others, 2, survivors)

            running.append(await outage.start_controller(env))
            counts = await split(client, swarms, running[1:])
            assert sorted(counts.values()) == [4, 4, 4], counts
            await running[-1].logged("lease_acquired")  # the new replica took its share

            async def handed_back() -> None:
                handed = [e for c in running[1:3] for e in c.events("lease_handed_back")]
                assert len(handed) >= 4, handed

            await ports.eventually(handed_back, timeout=WAIT_S)
            await replaced_once(client, emulator, swarms, 3, running[1:])
            assert_pods_once(emulator, swarms, 4)
            for swarm in swarms:
                for generation in (1, 2, 3):
                    eid = keys.execution_id(swarm, "eng-1", generation)
                    fence = await reading.fence(client, swarm, eid)
                    assert fence is not None and fence.released(records.ReleaseKind.POD), eid
            for ctl in running[1:]:
                outage.clean_log(ctl)
            members = await client.zrange(sharing.MEMBERS, 0, -1)
            assert holder_of(victim).encode() not in members
    finally:
        await client.aclose()


async def pause_through_the_other(
    running: list[outage.Controller], client: aioredis.Redis, swarm: str
) -> outage.Controller:
    """Apply a one-seat swarm, then pause and unpause it through the replica that does not
    hold it: the holder applies both (forwarded), the other logs neither. Returns that other
    replica."""
    await outage.apply(running[0], cs.document(swarm, seats=("eng-1",), automation=False))
    await ports.eventually(lambda: outage.launched(client, swarm, ("eng-1",), 1), timeout=WAIT_S)
    held = (await holders(client, [swarm]))[swarm]
    holder = next(c for c in running if holder_of(c) == held)
    other = next(c for c in running if c is not holder)
    paused = await other.stub.PauseRecovery(
        pb.PauseRecoveryRequest(swarm=swarm), metadata=cs.OPERATOR, timeout=WAIT_S
    )
    assert paused.paused
    await holder.logged("recovery_paused")
    assert not other.events("recovery_paused")
    await other.stub.UnpauseRecovery(
        pb.PauseRecoveryRequest(swarm=swarm), metadata=cs.OPERATOR, timeout=WAIT_S
    )
    assert not await reading.paused(client, swarm)
    return other


async def test_a_write_that_reaches_a_replica_without_the_lease_is_forwarded_to_the_holder(
    tmp_path: pathlib.Path, redis: RestartableRedis
) -> None:
    """Two replicas, one swarm (automation off). Pausing through the replica that does not hold
    the lease pauses it (gRPC, forwarded); a restore decision through it over HTTP is accepted
    by the holder (forwarded) and the seat is relaunched once; a forged credential is refused
    by the replica it reached, before anything is forwarded."""
    swarm = "forwarded"
    client = aioredis.Redis.from_url(redis.url)
    try:
        async with k8s_emulator.serving() as emulator, outage.controllers() as running:
            await start_replicas(running, 2, tmp_path, emulator, redis.url)
            other = await pause_through_the_other(running, client, swarm)

            lost = keys.execution_id(swarm, "eng-1", 1)
            outage.fail_pod(emulator, swarm, lost)

            async def awaiting() -> None:
                decision = await reading.decision(client, swarm, lost)
                assert (
                    decision is not None
                    and decision.state is records.DecisionState.RECOVERY_PENDING
                )

            await ports.eventually(awaiting, timeout=WAIT_S)
            url = f"{other.http}/v1/executions/{lost}/restore-decision"
            async with kube_cluster.http_session(other.tls) as http:
                async with http.post(
                    url,
                    json={"choice": "fresh"},
                    headers={"Authorization": "Bearer forged-token-0123456789abcdef"},
                ) as refused:
                    assert refused.status == 401
                async with http.post(
                    url,
                    json={"choice": "fresh"},
                    headers={"Authorization": f"Bearer {cs.OPERATOR_TOKEN}"},
                ) as answer:
                    body = await answer.json()
                    assert answer.status == 200, body
            assert body["repeated"] is False, body
            await ports.eventually(
                lambda: outage.launched(client, swarm, ("eng-1",), 2), timeout=WAIT_S
            )
            assert outage.pods_of(emulator, swarm) == [keys.execution_id(swarm, "eng-1", 2)]
            for ctl in running:
                outage.clean_log(ctl)
                assert (await ctl.readyz())[0] == 200
    finally:
        await client.aclose()
