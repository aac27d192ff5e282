"""Issue 23, "A loss is loud": a Redis without persistence restarted empty under a running
controller (`python -m services.controller.main` on the Kubernetes API emulator, a real
redis-server). Before: `/readyz` 200 and health SERVING, `status` an empty swarm, the workers
unmanaged, the epoch back at 1, and re-applying the swarm fenced every seat as `evicted`.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import pathlib
import shutil

from agentihooks.swarm.v2 import recovery_pb2 as pb

from services.cli import exits
from services.common import redis_link
from services.controller import losses
from services.controller.pods import notices, templates
from services.controller.state import keys, reading, records
from tests.e2e import kube_cluster
from tests.e2e import test_redis_outage as outage
from tests.e2e.test_redis_cluster import decide_over_http
from tests.support import controller_server as cs
from tests.support import ports
from tests.support.cli_process import agentihooks
from tests.support.kube.apiserver import emulator as k8s_emulator
from tests.support.redis_server import RestartableRedis

WAIT_S = outage.WAIT_S
SWARM, SEATS = "lost", ("eng-1", "eng-2", "eng-3")
FIRST = {s: keys.execution_id(SWARM, s, 1) for s in SEATS}
SECOND = {s: keys.execution_id(SWARM, s, 2) for s in SEATS}


def restart_empty(redis: RestartableRedis) -> None:
    """Kill Redis and start it again with nothing: as a Redis without persistence restarts."""
    redis.kill()
    shutil.rmtree(redis.folder / "appendonlydir", ignore_errors=True)
    redis.start()


def credential(emulator: k8s_emulator.K8sEmulator, execution: str) -> str:
    """The worker credential the attempt's Pod holds (its Secret)."""
    secret = emulator.get("secrets", templates.secret_name(SWARM, execution), cs.NAMESPACE)
    assert secret is not None, execution
    return base64.b64decode(secret["data"][templates.CREDENTIAL_KEY]).decode()


async def awaiting(r: redis_link.Client, execution: str) -> None:
    """The attempt is fenced and awaits a decision."""
    decision = await reading.decision(r, SWARM, execution)
    assert decision is not None
    assert decision.state is records.DecisionState.RECOVERY_PENDING


async def metric(ctl: outage.Controller, line: str) -> bool:
    async with (
        kube_cluster.http_session(ctl.tls) as http,
        http.get(f"{ctl.http}/metrics") as answer,
    ):
        return line in (await answer.text()).splitlines()


def state_lost_events(emulator: k8s_emulator.K8sEmulator) -> list[str]:
    """The Pods a `StateLost` Event regards."""
    return sorted(
        (event.get("regarding") or event.get("involvedObject") or {}).get("name", "")
        for event in emulator.objects("events", cs.NAMESPACE)
        if event.get("reason") == notices.Reason.STATE_LOST
    )


async def test_redis_restarted_empty_is_state_lost_until_the_swarm_is_applied_again(
    tmp_path: pathlib.Path,
) -> None:
    """One seat replaced after the operator's choice, two running; Redis restarted empty.
    Then: not ready and NOT_SERVING with `state_lost`, one `state_lost` line, the metric, a
    `StateLost` Event on each running worker, `status` refused with `state_lost`, and nothing
    written for the swarm but the lease and the marker. The operator applies the swarm again
    (the documented command): ready and SERVING again, the epoch past every epoch before, the
    decision kept (repeated, a different choice refused), the running first attempts adopted
    with the credentials their workers hold, each Pod created once, and a later failure
    recovered as usual."""
    redis = RestartableRedis(tmp_path / "redis")
    await asyncio.to_thread(redis.start)
    r = redis_link.connect(redis.url)
    document = tmp_path / "swarm.json"
    document.write_text(cs.document(SWARM, seats=SEATS, automation=False))
    try:
        async with (
            k8s_emulator.serving() as emulator,
            outage.controllers() as running,
            outage.recording_pods(emulator) as pod_events,
        ):
            ctl = await outage.start_controller(
                outage.controller_env(tmp_path, emulator, redis.url)
            )
            running.append(ctl)

            async def cli(*args: str) -> tuple[int, str, str]:
                ran = await agentihooks(
                    "swarm", SWARM, *args, control=ctl.grpc_addr, env=ctl.cli_env()
                )
                return ran.code, ran.out, ran.err

            await outage.apply(ctl, document.read_text())
            await ports.eventually(lambda: outage.launched(r, SWARM, SEATS, 1), timeout=WAIT_S)
            outage.fail_pod(emulator, SWARM, FIRST["eng-1"])
            await ports.eventually(lambda: awaiting(r, FIRST["eng-1"]), timeout=WAIT_S)
            status, body = await decide_over_http(ctl, FIRST["eng-1"], "fresh")
            assert status == 200 and body["state"] == "accepted", body
            await ports.eventually(lambda: outage.launched(r, SWARM, ("eng-1",), 2), timeout=WAIT_S)
            held = {s: await reading.execution(r, SWARM, FIRST[s]) for s in ("eng-2", "eng-3")}
            epoch_before = int(await r.get(keys.epoch(SWARM)) or 0)

            await asyncio.to_thread(restart_empty, redis)

            async def loud() -> None:
                code, body = await ctl.readyz()
                assert (code, body.get("reason")) == (503, losses.REASON), body
                assert await ctl.serving() == (outage.NOT_SERVING, outage.NOT_SERVING)
                assert await metric(ctl, f'agentihooks_state_lost{{swarm="{SWARM}"}} 1.0')

            await ports.eventually(loud, timeout=WAIT_S)
            [line] = ctl.events(losses.REASON)
            assert line["swarm"] == SWARM and line["kind"] == "records_missing", line
            assert line["pods"] == 3 and line["newest_epoch"] == epoch_before, line
            assert "agentihooks swarm apply" in line["message"]
            code, out, err = await cli("status")
            assert code == exits.EXIT_UNAVAILABLE and "(state_lost)" in err, (out, err)
            assert "apply the swarm's document again" in err
            live = sorted(
                templates.pod_name(SWARM, e)
                for e in (SECOND["eng-1"], *FIRST.values())
                if e != FIRST["eng-1"]
            )

            async def told() -> None:
                assert state_lost_events(emulator) == live

            await ports.eventually(told, timeout=WAIT_S)
            # Nothing of the swarm's recovery state was written meanwhile.
            written = {k.decode() for k in await r.keys(f"agentihooks:{{{SWARM}}}:*")}
            assert written <= {keys.lease(SWARM), keys.epoch(SWARM), keys.state_lost(SWARM)}, (
                written
            )

            # The documented operator command.
            code, out, err = await cli("apply", str(document))
            assert code == 0, (out, err)

            async def back() -> None:
                code, body = await ctl.readyz()
                assert code == 200, body
                assert await ctl.serving() == (outage.SERVING, outage.SERVING)
                assert await r.get(keys.state_lost(SWARM)) is None
                seat = await reading.seat(r, SWARM, "eng-1")
                assert seat is not None and seat.current_execution_id == SECOND["eng-1"]

            await ports.eventually(back, timeout=WAIT_S)
            assert ctl.events("state_recovered")
            assert int(await r.get(keys.epoch(SWARM)) or 0) > epoch_before
            kept = await reading.decision(r, SWARM, FIRST["eng-1"])
            assert kept is not None and kept.state is records.DecisionState.ACCEPTED
            assert kept.replacement_execution_id == SECOND["eng-1"], kept
            fence = await reading.fence(r, SWARM, FIRST["eng-1"])
            assert fence is not None and fence.reason == "application_exit", fence
            status, body = await decide_over_http(ctl, FIRST["eng-1"], "fresh")
            assert status == 200 and body["repeated"], body
            status, body = await decide_over_http(ctl, FIRST["eng-1"], "resume")
            assert body["reason"] == "no recovery decision is pending for this attempt"
            code, out, err = await cli("status")
            assert code == 0, (out, err)
            for seat in ("eng-2", "eng-3"):
                adopted = await reading.execution(r, SWARM, FIRST[seat])
                before = held[seat]
                assert adopted is not None and before is not None
                assert adopted.credential_id == before.credential_id, seat
                assert adopted.capture_grant_id == before.capture_grant_id, seat
                # The worker's own credential answers: its launch record is served.
                launch = await ctl.stub.GetLaunchRecord(
                    pb.GetLaunchRecordRequest(),
                    metadata=cs.md(credential(emulator, FIRST[seat])),
                    timeout=WAIT_S,
                )
                assert launch.scope.execution_id == FIRST[seat]

            # A later failure is recovered as before the loss.
            outage.fail_pod(emulator, SWARM, FIRST["eng-3"])
            await ports.eventually(lambda: awaiting(r, FIRST["eng-3"]), timeout=WAIT_S)
            status, body = await decide_over_http(ctl, FIRST["eng-3"], "fresh")
            assert status == 200 and body["state"] == "accepted", body
            await ports.eventually(lambda: outage.launched(r, SWARM, ("eng-3",), 2), timeout=WAIT_S)
            # Each Pod created once; only the lost attempts' Pods deleted, once each.
            await outage.pods_caught_up(emulator, pod_events)
            seen = collections.Counter(
                (t, e) for t, e in pod_events if t != "MODIFIED" and e.startswith(SWARM)
            )
            assert seen == collections.Counter(
                {
                    ("ADDED", FIRST["eng-1"]): 1,
                    ("ADDED", FIRST["eng-2"]): 1,
                    ("ADDED", FIRST["eng-3"]): 1,
                    ("ADDED", SECOND["eng-1"]): 1,
                    ("ADDED", SECOND["eng-3"]): 1,
                    ("DELETED", FIRST["eng-1"]): 1,
                    ("DELETED", FIRST["eng-3"]): 1,
                }
            ), seen
            assert len(ctl.events(losses.REASON)) == 1
            assert ctl.alive()
            assert await ctl.stop() == 0
            outage.clean_log(ctl)
    finally:
        await r.aclose()
        redis.kill()


async def test_a_controller_started_on_an_emptied_redis_finds_the_swarms_its_workers_run(
    tmp_path: pathlib.Path,
) -> None:
    """The controller is stopped, Redis restarts empty, a controller starts: Redis names no
    swarm, but the workers it finds in the cluster do. It says `state_lost` for their swarm
    (not ready, status refused) and adopts them once the swarm is applied again: no worker is
    created twice and each keeps its credential."""
    redis = RestartableRedis(tmp_path / "redis")
    await asyncio.to_thread(redis.start)
    r = redis_link.connect(redis.url)
    document = cs.document(SWARM, seats=SEATS, automation=False)
    try:
        async with k8s_emulator.serving() as emulator, outage.controllers() as running:
            env = outage.controller_env(tmp_path, emulator, redis.url)
            ctl = await outage.start_controller(env)
            running.append(ctl)
            await outage.apply(ctl, document)
            await ports.eventually(lambda: outage.launched(r, SWARM, SEATS, 1), timeout=WAIT_S)
            held = {s: await reading.execution(r, SWARM, FIRST[s]) for s in SEATS}
            assert await ctl.stop() == 0
            await asyncio.to_thread(restart_empty, redis)

            again = await outage.start_controller(env)
            running.append(again)

            async def loud() -> None:
                code, body = await again.readyz()
                assert (code, body.get("reason")) == (503, losses.REASON), body
                line = again.events(losses.REASON)
                assert line and line[0]["kind"] == "records_missing" and line[0]["pods"] == 3

            await ports.eventually(loud, timeout=WAIT_S)
            refused = await outage.unavailable(
                again.stub.GetSwarmStatus(
                    pb.GetSwarmStatusRequest(swarm=SWARM), metadata=cs.OPERATOR, timeout=WAIT_S
                )
            )
            assert outage.reason_of(refused) == losses.REASON
            await outage.apply(again, document)

            async def back() -> None:
                code, body = await again.readyz()
                assert code == 200, body
                for seat in SEATS:
                    adopted = await reading.execution(r, SWARM, FIRST[seat])
                    before = held[seat]
                    assert adopted is not None and before is not None and adopted.launched
                    assert adopted.credential_id == before.credential_id, seat

            await ports.eventually(back, timeout=WAIT_S)
            assert outage.pods_of(emulator, SWARM) == sorted(FIRST.values())
            for seat in SEATS:
                launch = await again.stub.GetLaunchRecord(
                    pb.GetLaunchRecordRequest(),
                    metadata=cs.md(credential(emulator, FIRST[seat])),
                    timeout=WAIT_S,
                )
                assert launch.scope.execution_id == FIRST[seat]
            assert await again.stop() == 0
            outage.clean_log(again)
    finally:
        await r.aclose()
        redis.kill()
