"""The controller on a real Redis Cluster: three masters with a replica each, started from
`redis-server --cluster-enabled yes` processes and joined by `redis-cli --cluster create`.

The real controller entry point runs against the Kubernetes API emulator with
`AGENTIHOOKS_REDIS_URL=redis+cluster://…` naming one node. Swarms are chosen so that their hash
tags land on three different masters; every transition is one script on one slot, so each swarm
is recovered on its own master, and a `CLUSTER FAILOVER` in the middle of a recovery loses
nothing and does nothing twice.
"""

from __future__ import annotations

import asyncio
import collections
import pathlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from agentihooks.swarm.v2 import recovery_pb2 as pb
from redis.crc import key_slot

from services.cli import exits
from services.common import redis_link, revocations
from services.controller import telemetry
from services.controller.pods import runtime
from services.controller.state import durable, keys, reading, records, scripting
from tests.e2e import kube_cluster
from tests.e2e import test_redis_outage as outage
from tests.support import controller_server as cs
from tests.support import ports
from tests.support.cli_process import agentihooks
from tests.support.kube.apiserver import emulator as k8s_emulator
from tests.support.redis_cluster import Node, RedisCluster

WAIT_S = outage.WAIT_S


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[RedisCluster]:
    running = RedisCluster(tmp_path / "cluster")
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture
async def cluster_client(cluster: RedisCluster) -> AsyncIterator[redis_link.Client]:
    client = redis_link.connect(cluster.url)
    try:
        yield client
    finally:
        await client.aclose()


def swarms_on_each_master(cluster: RedisCluster, prefix: str) -> list[str]:
    """One swarm name per master: names whose hash tag's slot each master serves."""
    chosen: dict[int, str] = {}
    for i in range(200):
        name = f"{prefix}-{i}"
        master = cluster.master_of_slot_for(keys.lease(name))
        chosen.setdefault(master.port, name)
        if len(chosen) == cluster.masters:
            return list(chosen.values())
    raise AssertionError("no swarm name found for every master")


class FailoverOnCall(collections.Counter[str]):
    """The emulator's call counter; when an armed call arrives (before the emulator answers it)
    the replica of the given master takes over with `CLUSTER FAILOVER`."""

    armed: tuple[str, RedisCluster, Node] | None = None
    fired = False

    def __setitem__(self, call: str, count: int) -> None:
        super().__setitem__(call, count)
        if self.armed is not None and call == self.armed[0]:
            _, cluster, master = self.armed
            self.armed = None
            cluster.failover(cluster.replica_of(master))
            self.fired = True


async def test_one_controller_recovers_swarms_on_three_masters(
    tmp_path: pathlib.Path, cluster: RedisCluster, cluster_client: redis_link.Client
) -> None:
    """Three swarms, one on each master: the controller started with a `redis+cluster://` URL
    takes each lease, launches every seat, and replaces a failed worker in each swarm exactly
    once; each swarm's keys live on its own master. Health is SERVING and the log names the
    cluster, never a traceback."""
    names = swarms_on_each_master(cluster, "cl")
    masters = {cluster.master_of_slot_for(keys.lease(n)).port for n in names}
    assert len(masters) == cluster.masters
    seats = ("eng-1", "eng-2")
    async with k8s_emulator.serving() as emulator, outage.controllers() as running:
        ctl = await outage.start_controller(outage.controller_env(tmp_path, emulator, cluster.url))
        running.append(ctl)
        for name in names:
            await outage.apply(ctl, cs.document(name, seats=seats, legacy=True))
        for name in names:
            await ports.eventually(
                lambda n=name: outage.launched(cluster_client, n, seats, 1), timeout=WAIT_S
            )
            outage.fail_pod(emulator, name, keys.execution_id(name, "eng-1", 1))
        for name in names:
            await ports.eventually(
                lambda n=name: outage.launched(cluster_client, n, ("eng-1",), 2), timeout=WAIT_S
            )
            assert outage.pods_of(emulator, name) == sorted(
                [keys.execution_id(name, "eng-1", 2), keys.execution_id(name, "eng-2", 1)]
            )
            held = await cluster_client.get(keys.lease(name))
            assert held is not None and held.decode().startswith("controller"), held
        assert sorted(await reading.swarm_names(cluster_client)) == sorted(names)
        scripts = scripting.Scripts(cluster_client)
        for name in names:
            # The pass's read-only script names the seats' records from what it reads: on
            # each master it finds the replaced seat only awaiting its replacement's report.
            async def awaiting(n: str = name) -> None:
                reads = await reading.before_listing(scripts, n)
                assert reads.attention == ["eng-1"], reads
                assert reads.awaiting == {"eng-1"} and not reads.seats, reads
                assert reads.expected == {
                    keys.execution_id(n, "eng-1", 2): 0,
                    keys.execution_id(n, "eng-2", 1): 0,
                }, reads

            await ports.eventually(awaiting, timeout=WAIT_S)
        assert not ctl.events("pass_failed") and not ctl.events("seat_step_failed")
        assert await ctl.serving() == (outage.SERVING, outage.SERVING)
        listening = ctl.events("redis_available") or ctl.events("listening")
        assert listening
        assert await ctl.stop() == 0
        outage.clean_log(ctl)


async def test_a_master_failover_mid_recovery_loses_nothing_and_does_nothing_twice(
    tmp_path: pathlib.Path, cluster: RedisCluster, cluster_client: redis_link.Client
) -> None:
    """Three seats fail at once; while the first replacement Pod is being created (fences and
    decisions written, launches in flight) the swarm's master is failed over to its replica
    with `CLUSTER FAILOVER`. Afterwards each seat has exactly one replacement, each Pod was
    created once and each lost one deleted once, one fence and one recovery event per lost
    attempt; and the controller runs on against the new master: a later failure is replaced."""
    swarm, seats = swarms_on_each_master(cluster, "fo")[0], ("eng-1", "eng-2", "eng-3")
    first = {s: keys.execution_id(swarm, s, 1) for s in seats}
    second = {s: keys.execution_id(swarm, s, 2) for s in seats}
    async with k8s_emulator.serving() as emulator, outage.controllers() as running:
        calls = FailoverOnCall(emulator.calls)
        emulator.calls = calls
        pod_events: list[tuple[str, str]] = []
        recorder = asyncio.create_task(outage.watch_pods(emulator, pod_events))
        try:
            ctl = await outage.start_controller(
                outage.controller_env(tmp_path, emulator, cluster.url)
            )
            running.append(ctl)
            await outage.apply(ctl, cs.document(swarm, seats=seats, legacy=True))
            await ports.eventually(
                lambda: outage.launched(cluster_client, swarm, seats, 1), timeout=WAIT_S
            )
            master = cluster.master_of_slot_for(keys.lease(swarm))
            calls.armed = ("create pods", cluster, master)
            for seat in seats:
                outage.fail_pod(emulator, swarm, first[seat])
            await ports.eventually(
                lambda: outage.launched(cluster_client, swarm, seats, 2), timeout=WAIT_S
            )
            assert calls.fired
            assert cluster.role(master) == "slave"
            assert cluster.master_of_slot_for(keys.lease(swarm)).port != master.port
            assert outage.pods_of(emulator, swarm) == sorted(second.values())
            await outage.assert_each_pod_once(emulator, pod_events, swarm, first, second)
            events = collections.Counter(
                (e.kind, e.execution_id)
                for e in await telemetry.read(cluster_client, swarm, count=1000)
            )
            for seat in seats:
                assert events[("fence", first[seat])] == 1, events
                assert events[("recovery", first[seat])] == 1, events
                decision = await reading.decision(cluster_client, swarm, first[seat])
                assert decision is not None
                assert decision.state is records.DecisionState.ACCEPTED
                assert decision.replacement_execution_id == second[seat]
            # The controller runs on against the new master.
            outage.fail_pod(emulator, swarm, second["eng-1"])

            async def fenced_again() -> None:
                assert await reading.fence(cluster_client, swarm, second["eng-1"]) is not None

            await ports.eventually(fenced_again, timeout=WAIT_S)
            assert ctl.alive()
            assert await ctl.stop() == 0
            outage.clean_log(ctl)
        finally:
            emulator.drop_watches()
            recorder.cancel()
            await asyncio.gather(recorder, return_exceptions=True)


async def test_revocations_on_a_cluster_are_seen_by_every_client(
    cluster: RedisCluster, cluster_client: redis_link.Client
) -> None:
    """The store's revocation check on a cluster: a token id revoked through one client is
    revoked for another client that was pointed at a different node, on the swarm's slot."""
    other = redis_link.connect(f"redis+cluster://127.0.0.1:{cluster.nodes[-1].port}")
    try:
        writer = revocations.RedisRevocations(cluster_client)
        reader = revocations.RedisRevocations(other)
        assert not await reader.is_revoked("alpha", "token-1")
        await writer.revoke("alpha", "token-1", expires_at=2**31)
        assert await reader.is_revoked("alpha", "token-1")
        assert not await reader.is_revoked("bravo", "token-1")
        assert key_slot(revocations.key("alpha", "t").encode()) == key_slot(
            keys.lease("alpha").encode()
        )
    finally:
        await other.aclose()


async def decide_over_http(
    ctl: outage.Controller, execution: str, choice: str
) -> tuple[int, dict[str, Any]]:
    """POST the operator's choice to the HTTP restore-decision; the status and the body."""
    async with (
        kube_cluster.http_session(ctl.tls) as http,
        http.post(
            f"{ctl.http}/v1/executions/{execution}/restore-decision",
            json={"choice": choice},
            headers={"Authorization": f"Bearer {cs.OPERATOR_TOKEN}"},
        ) as answer,
    ):
        return answer.status, await answer.json()


def _live_pods(emulator: k8s_emulator.K8sEmulator, swarm: str, seat: str) -> list[str]:
    """The executions of the seat's Pods the API server holds that are not being deleted."""
    return sorted(
        labels[runtime.LABEL_EXECUTION]
        for pod in emulator.objects("pods", cs.NAMESPACE)
        if not pod["metadata"].get("deletionTimestamp")
        and (labels := pod["metadata"].get("labels") or {}).get(runtime.LABEL_SWARM) == swarm
        and labels.get(runtime.LABEL_SEAT) == seat
    )


async def test_only_durable_decisions_are_acknowledged_and_they_survive_a_stale_replica_promotion(
    tmp_path: pathlib.Path, cluster: RedisCluster, cluster_client: redis_link.Client
) -> None:
    """Issue 23, "Acknowledge only what is durable", with AGENTIHOOKS_REDIS_WAIT_REPLICAS=1 on
    the controller's real entry point. A decision taken while the swarm's master has its
    replica is answered accepted. With the replica cut off, a decision (the CLI's, which the
    pass applies, and the HTTP one), a repeat of the accepted decision, a pause and an
    admission are each answered UNAVAILABLE `not_durable`, and the CLI and HTTP say so. Then
    the master is killed and the stale replica promoted (`CLUSTER FAILOVER TAKEOVER`): the
    acknowledged decision is there with its replacement; what was refused is lost, as the
    callers were told it might be. Once the old master rejoins as a replica, repeating the
    acknowledged choice returns it, a different one is refused (spec: "no recovery decision is
    pending for this attempt"), a lost decision can be taken again, and each seat ends with
    exactly one live Pod, of its newest generation."""
    swarm, seats = swarms_on_each_master(cluster, "ack")[0], ("eng-1", "eng-2", "eng-3")
    lost = {s: keys.execution_id(swarm, s, 1) for s in seats}
    async with k8s_emulator.serving() as emulator, outage.controllers() as running:
        env = outage.controller_env(tmp_path, emulator, cluster.url) | {
            "AGENTIHOOKS_REDIS_WAIT_REPLICAS": "1",
            "AGENTIHOOKS_REDIS_WAIT_TIMEOUT_MS": "1000",
        }
        ctl = await outage.start_controller(env)
        running.append(ctl)
        await outage.apply(ctl, cs.document(swarm, seats=seats, automation=False))
        await ports.eventually(
            lambda: outage.launched(cluster_client, swarm, seats, 1), timeout=WAIT_S
        )
        for seat in seats:
            outage.fail_pod(emulator, swarm, lost[seat])

        async def awaiting_decisions() -> None:
            for seat in seats:
                decision = await reading.decision(cluster_client, swarm, lost[seat])
                assert decision is not None, seat
                assert decision.state is records.DecisionState.RECOVERY_PENDING, decision

        await ports.eventually(awaiting_decisions, timeout=WAIT_S)
        status, body = await decide_over_http(ctl, lost["eng-1"], "fresh")
        assert status == 200 and body["state"] == "accepted" and not body["repeated"], body
        acknowledged = body["replacement_execution_id"]
        # The acknowledgement wrote on the swarm's master before it waited (`durable`).
        assert await cluster_client.get(keys.acks(swarm)) is not None

        master = cluster.master_of_slot_for(keys.lease(swarm))
        replica = cluster.replica_of(master)
        cluster.cut_off(replica, master)
        try:
            ran = await agentihooks(
                "swarm",
                swarm,
                "restore-decision",
                "eng-2",
                "fresh",
                control=ctl.grpc_addr,
                env=ctl.cli_env(),
            )
            assert ran.code == exits.EXIT_UNAVAILABLE, (ran.out, ran.err)
            assert "(not_durable)" in ran.err, ran.err
            assert "0 of the 1 replicas AGENTIHOOKS_REDIS_WAIT_REPLICAS asks for" in ran.err
            assert "applied" not in ran.out, ran.out
            for execution in (lost["eng-3"], lost["eng-1"]):  # a new decision, a repeat
                status, body = await decide_over_http(ctl, execution, "fresh")
                assert (status, body["reason"]) == (503, durable.REASON), body
                assert "send the call again" in body["message"], body
            ran = await agentihooks(
                "swarm", swarm, "pause", control=ctl.grpc_addr, env=ctl.cli_env()
            )
            assert ran.code == exits.EXIT_UNAVAILABLE and "(not_durable)" in ran.err, ran.err
            more = cs.document(swarm, seats=(*seats, "eng-4"), automation=False)
            refused = await outage.unavailable(
                ctl.stub.ApplySwarm(
                    pb.ApplySwarmRequest(document=more), metadata=cs.OPERATOR, timeout=WAIT_S
                )
            )
            assert outage.reason_of(refused) == durable.REASON
            assert "AGENTIHOOKS_REDIS_WAIT_REPLICAS" in (refused.details() or "")
            cluster.kill(master)
        finally:
            cluster.resume(replica)
        cluster.takeover(replica)

        # The acknowledged decision survived; what was refused was lost with the old master.
        async def promoted() -> records.Decision:
            decision = await reading.decision(cluster_client, swarm, lost["eng-1"])
            assert decision is not None
            return decision

        kept = await ports.eventually(promoted, timeout=WAIT_S)
        assert kept.state is records.DecisionState.ACCEPTED
        assert kept.choice is records.Choice.FRESH
        assert kept.replacement_execution_id == acknowledged
        for seat in ("eng-2", "eng-3"):
            # Never acknowledged: lost with the old master, unless its replacement was launched
            # before the master died; that Pod carries the decision and it is written back
            # (issue 23, part 2: the cluster is a second witness), never a different one.
            decision = await reading.decision(cluster_client, swarm, lost[seat])
            assert decision is not None
            if decision.state is records.DecisionState.ACCEPTED:
                assert decision.choice is records.Choice.FRESH, decision
                assert decision.replacement_execution_id in outage.pods_of(emulator, swarm)
            else:
                assert decision.state is records.DecisionState.RECOVERY_PENDING, decision
        assert not await reading.paused(cluster_client, swarm)
        assert await reading.seat(cluster_client, swarm, "eng-4") is None

        # The old master rejoins as the new master's replica: acknowledgements answer again.
        cluster.restart(master)
        cluster.wait_replicated()

        async def answered(execution: str, choice: str) -> dict[str, Any]:
            status, body = await decide_over_http(ctl, execution, choice)
            assert status != 503, body  # a lease taken again, a replica catching up
            return body

        again = await ports.eventually(lambda: answered(lost["eng-1"], "fresh"), timeout=WAIT_S)
        assert again["repeated"] and again["replacement_execution_id"] == acknowledged, again
        other = await answered(lost["eng-1"], "resume")
        assert other["reason"] == "no recovery decision is pending for this attempt", other
        retaken = await answered(lost["eng-3"], "fresh")
        assert retaken["state"] == "accepted", retaken
        eng_2 = await reading.decision(cluster_client, swarm, lost["eng-2"])
        if eng_2 is not None and eng_2.state is records.DecisionState.RECOVERY_PENDING:
            assert (await answered(lost["eng-2"], "fresh"))["state"] == "accepted"

        # Every seat ends with exactly one live Pod, of its newest generation: nothing launched
        # for a lost write runs beside it, and no lost attempt's Pod is left.
        async def one_pod_each() -> None:
            for seat in seats:
                record = await reading.seat(cluster_client, swarm, seat)
                assert record is not None and record.generation == 2, (seat, record)
                assert _live_pods(emulator, swarm, seat) == [record.current_execution_id]

        await ports.eventually(one_pod_each, timeout=WAIT_S)
        assert ctl.alive()
        assert await ctl.stop() == 0
        outage.clean_log(ctl)
        assert ctl.events("not_durable")
