"""A missing or restarting Redis is a state, not a crash: `agentihooks-controller` as an OS process
(`python -m services.controller.main`, RUNTIME=kubernetes against the API emulator in this
process, through a generated kubeconfig) and a real redis-server of each test's own that is
killed (SIGKILL) and started again on the same port with its data (AOF, synced before Redis
answers). Nothing is mocked.

What a user measured before: with Redis unreachable the controller printed a traceback and
exited; a Redis restart ended every swarm loop silently, with gRPC health still SERVING, no
lease held, failures not replaced and no takeover.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import os
import pathlib
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from typing import Any

import grpc
import pytest
import redis.asyncio as aioredis
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import recovery_pb2_grpc as pb_grpc
from agentihooks.swarm.v2 import types_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.cli import exits
from services.common import redis_link, rpc, tls, tls_settings
from services.controller import telemetry
from services.controller.api import grpc_api
from services.controller.pods import runtime, templates
from services.controller.state import keys, reading, records
from tests.e2e import kube_cluster
from tests.e2e.test_controller_crash import kubeconfig
from tests.support import controller_server as cs
from tests.support import ports
from tests.support.cli_process import agentihooks
from tests.support.kube.apiserver import emulator as k8s_emulator
from tests.support.redis_server import RestartableRedis

ROOT = pathlib.Path(__file__).resolve().parents[2]
WAIT_S = 180.0
"""A generous deadline: controller processes run beside the rest of the suite on a shared
two-core machine (waits end on the event, the deadline only bounds a failure)."""
PASSWORD = "redis-password-4c1d-never-logged"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@dataclasses.dataclass
class Controller:
    """One controller OS process, what it logged, and ways to ask it."""

    proc: asyncio.subprocess.Process
    channel: grpc.aio.Channel
    stub: pb_grpc.RecoveryStub
    http: str
    grpc_addr: str
    raw: list[bytes]
    lines: list[dict[str, Any]]
    reader: asyncio.Task[None]
    tls: tls_settings.TLSSettings = tls_settings.PLAINTEXT
    """How the test dials it (gRPC, HTTP and the CLI): with the CA of its environment."""

    def alive(self) -> bool:
        return self.proc.returncode is None

    def cli_env(self) -> dict[str, str]:
        """The TLS settings an operator's `agentihooks` needs to reach this controller."""
        return kube_cluster.settings_env(self.tls)

    def events(self, name: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("event") == name]

    async def logged(self, name: str, at_least: int = 1) -> list[dict[str, Any]]:
        """The `name` lines once at least `at_least` were read: this process's output is read
        by a task of ours, which on a loaded machine may lag behind what the process did."""

        async def seen() -> list[dict[str, Any]]:
            found = self.events(name)
            assert len(found) >= at_least, (name, len(found))
            return found

        result: list[dict[str, Any]] = await ports.eventually(seen, timeout=WAIT_S)
        return result

    async def health(self, service: str = "") -> int:
        stub = health_pb2_grpc.HealthStub(self.channel)
        answer = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=WAIT_S)
        return int(answer.status)

    async def serving(self) -> tuple[int, int]:
        """The health of the server as a whole and of the Recovery service."""
        return await self.health(""), await self.health(grpc_api.SERVICE_NAME)

    async def readyz(self) -> tuple[int, dict[str, Any]]:
        async with (
            kube_cluster.http_session(self.tls) as session,
            session.get(f"{self.http}/readyz") as response,
        ):
            return response.status, await response.json()

    async def stop(self) -> int:
        """SIGTERM; the exit code."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.proc.wait(), WAIT_S)
        await self.reader
        await self.channel.close()
        return code

    async def kill(self) -> None:
        if self.alive():
            self.proc.kill()
        await asyncio.wait_for(self.proc.wait(), WAIT_S)
        await self.reader
        await self.channel.close()


def controller_env(
    tmp_path: pathlib.Path, emulator: k8s_emulator.K8sEmulator, url: str
) -> dict[str, str]:
    """A controller process on the emulator and `url`, TLS on every connection it serves and
    its workers dial (`kube_cluster.controller_process_env`; Redis and the API emulator stay
    plaintext)."""
    return {
        **kube_cluster.controller_process_env(tmp_path / "tls", emulator),
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", emulator.url)),
        "AGENTIHOOKS_REDIS_URL": url,
        "AGENTIHOOKS_GRANT_KEY": cs.GRANT_KEY,
        "AGENTIHOOKS_OPERATOR_TOKEN": cs.OPERATOR_TOKEN,
        "AGENTIHOOKS_WORKER_IMAGE": cs.IMAGE,
        "AGENTIHOOKS_RUNTIME": "kubernetes",
        "AGENTIHOOKS_NAMESPACE": cs.NAMESPACE,
        "AGENTIHOOKS_LEASE_MS": "2000",
        "AGENTIHOOKS_PASS_INTERVAL_MS": "100",
    }


async def start_controller(env: Mapping[str, str]) -> Controller:
    """Start a controller process; return once it logged `listening` (it serves). The test
    dials it as `kube_cluster.client_of(env)`: TLS with the CA `env` names."""
    grpc_port, http_port = ports.free_port(), ports.free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.controller.main",
        "--listen",
        f"127.0.0.1:{grpc_port}",
        "--http",
        f"127.0.0.1:{http_port}",
        cwd=ROOT,
        env=dict(env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    raw: list[bytes] = []
    lines: list[dict[str, Any]] = []
    listening = asyncio.Event()

    async def read() -> None:
        assert proc.stderr is not None
        async for line in proc.stderr:
            raw.append(line)
            try:
                parsed = json.loads(line)
            except ValueError:
                parsed = {"raw": line.decode(errors="replace")}
            lines.append(parsed)
            if parsed.get("event") == "listening":
                listening.set()
        listening.set()

    reader = asyncio.create_task(read())
    client = kube_cluster.client_of(env)
    channel = tls.channel(f"127.0.0.1:{grpc_port}", client)
    ctl = Controller(
        proc,
        channel,
        pb_grpc.RecoveryStub(channel),
        kube_cluster.http_base(client, http_port),
        f"127.0.0.1:{grpc_port}",
        raw,
        lines,
        reader,
        client,
    )
    await asyncio.wait_for(listening.wait(), WAIT_S)
    assert ctl.alive(), f"the controller did not start: {lines[-10:]}"
    # It serves as the test dials it (TLS when `env` names a certificate).
    listened = ctl.events("listening")
    assert listened, f"the controller did not start: {lines[-10:]}"
    assert listened[0]["transport"] == tls_settings.transport(client), listened
    return ctl


@contextlib.asynccontextmanager
async def controllers() -> AsyncIterator[list[Controller]]:
    """Controllers started in the block, killed at its end if still running."""
    running: list[Controller] = []
    try:
        yield running
    finally:
        for ctl in running:
            if ctl.alive():
                await ctl.kill()


def clean_log(ctl: Controller) -> None:
    """Every line is one JSON object; no traceback; the Redis password is nowhere."""
    text = b"".join(ctl.raw).decode(errors="replace")
    assert PASSWORD not in text
    assert "Traceback" not in text, text[-3000:]
    assert all("raw" not in line for line in ctl.lines), [
        line for line in ctl.lines if "raw" in line
    ]


@contextlib.asynccontextmanager
async def recording_pods(
    emulator: k8s_emulator.K8sEmulator,
) -> AsyncIterator[list[tuple[str, str]]]:
    """Every Pod event of the namespace as (type, execution) while the block runs
    (`watch_pods`); the emulator's watches are dropped at its end."""
    pod_events: list[tuple[str, str]] = []
    recorder = asyncio.create_task(watch_pods(emulator, pod_events))
    try:
        yield pod_events
    finally:
        emulator.drop_watches()
        recorder.cancel()
        await asyncio.gather(recorder, return_exceptions=True)


async def pods_caught_up(
    emulator: k8s_emulator.K8sEmulator, pod_events: list[tuple[str, str]]
) -> None:
    """Once the Pod watch recorder (`watch_pods`) saw everything so far: a marker Pod is
    created and waited for."""
    emulator.create(
        "pods",
        {"metadata": {"name": "marker", "labels": {runtime.LABEL_EXECUTION: "mark"}}},
        namespace=cs.NAMESPACE,
    )

    async def caught_up() -> None:
        assert ("ADDED", "mark") in pod_events

    await ports.eventually(caught_up, timeout=WAIT_S)


async def assert_each_pod_once(
    emulator: k8s_emulator.K8sEmulator,
    pod_events: list[tuple[str, str]],
    swarm: str,
    first: Mapping[str, str],
    second: Mapping[str, str],
) -> None:
    """Each Pod of `swarm` created once, each lost one (`first`) deleted once, as the Pod
    watch recorded them (`pod_events`)."""
    await pods_caught_up(emulator, pod_events)
    seen = collections.Counter(
        (t, e) for t, e in pod_events if t != "MODIFIED" and e.startswith(swarm)
    )
    expected = collections.Counter(
        {("ADDED", e): 1 for e in [*first.values(), *second.values()]}
        | {("DELETED", e): 1 for e in first.values()}
    )
    assert seen == expected, seen


async def unavailable(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() is grpc.StatusCode.UNAVAILABLE, caught.value
    return caught.value


def reason_of(error: grpc.aio.AioRpcError) -> str | None:
    for key, value in error.trailing_metadata() or ():
        if key == rpc.REASON_KEY:
            return str(value)
    return None


async def apply(ctl: Controller, doc: str) -> None:
    """ApplySwarm, again while the controller answers UNAVAILABLE (not the lease holder yet)."""

    async def applied() -> None:
        try:
            await ctl.stub.ApplySwarm(
                pb.ApplySwarmRequest(document=doc), metadata=cs.OPERATOR, timeout=WAIT_S
            )
        except grpc.aio.AioRpcError as exc:
            assert exc.code() is not grpc.StatusCode.UNAVAILABLE, exc
            raise

    await ports.eventually(applied, timeout=WAIT_S)


async def launched(r: aioredis.Redis, swarm: str, seats: tuple[str, ...], generation: int) -> None:
    """Each seat's attempt of `generation` is launched and the one before's Pod released."""
    for seat in seats:
        execution = await reading.execution(r, swarm, keys.execution_id(swarm, seat, generation))
        assert execution is not None and execution.launched, (seat, generation)
        if generation > 1:
            lost = keys.execution_id(swarm, seat, generation - 1)
            fence = await reading.fence(r, swarm, lost)
            assert fence is not None and fence.released(records.ReleaseKind.POD), lost


def pods_of(emulator: k8s_emulator.K8sEmulator, swarm: str) -> list[str]:
    """The execution of every Pod of the swarm the emulator holds."""
    return sorted(
        pod["metadata"]["labels"][runtime.LABEL_EXECUTION]
        for pod in emulator.objects("pods", cs.NAMESPACE)
        if (pod["metadata"].get("labels") or {}).get(runtime.LABEL_SWARM) == swarm
    )


def fail_pod(emulator: k8s_emulator.K8sEmulator, swarm: str, execution: str) -> None:
    emulator.set_pod_status(
        cs.NAMESPACE, templates.pod_name(swarm, execution), cs.terminated("Error", 1)
    )


async def test_a_controller_started_without_redis_serves_unready_and_starts_work_when_it_answers(
    tmp_path: pathlib.Path,
) -> None:
    """Started with Redis down (its URL holds a password): the controller serves gRPC and HTTP,
    is not ready (/readyz 503 `redis_unavailable`) and NOT_SERVING (the server as a whole and
    Recovery), answers calls UNAVAILABLE, and logs one JSON line per retry step with a
    doubling backoff, naming AGENTIHOOKS_REDIS_URL and host:port, never the password. Redis
    comes up: SERVING, a swarm can be applied, the controller is ready and a failed worker is
    replaced. It stops cleanly on SIGTERM; no traceback anywhere."""
    redis = RestartableRedis(tmp_path / "redis", password=PASSWORD)
    swarm, seats = "outage-start", ("eng-1", "eng-2")
    try:
        async with k8s_emulator.serving() as emulator, controllers() as running:
            ctl = await start_controller(controller_env(tmp_path, emulator, redis.url))
            running.append(ctl)

            async def retrying() -> None:
                assert len(ctl.events("redis_unavailable")) >= 3

            await ports.eventually(retrying, timeout=WAIT_S)
            steps = ctl.events("redis_unavailable")
            assert [s["attempt"] for s in steps[:3]] == [1, 2, 3], steps
            assert [s["retry_in_s"] for s in steps[:3]] == [0.5, 1.0, 2.0], steps
            for step in steps:
                assert step["variable"] == "AGENTIHOOKS_REDIS_URL", step
                assert step["address"] == f"127.0.0.1:{redis.port}", step
                assert step["level"] == "warning" and step["service"] == "controller", step
                assert step["exception"] == "ConnectionError", step
            assert await ctl.serving() == (NOT_SERVING, NOT_SERVING)
            status, body = await ctl.readyz()
            assert (status, body["reason"]) == (503, redis_link.REASON), body
            refused = await unavailable(
                ctl.stub.GetSwarmStatus(
                    pb.GetSwarmStatusRequest(swarm=swarm), metadata=cs.OPERATOR, timeout=WAIT_S
                )
            )
            assert reason_of(refused) == redis_link.REASON
            # The CLI says what the controller answered, not a connection hint: exit 6 all
            # the same, so a script retries.
            ran = await agentihooks(
                "swarm", swarm, "status", control=ctl.grpc_addr, env=ctl.cli_env()
            )
            assert ran.code == exits.EXIT_UNAVAILABLE, (ran.out, ran.err)
            assert "Redis does not answer (AGENTIHOOKS_REDIS_URL)" in ran.err, ran.err
            assert redis_link.REASON in ran.err and "--control" not in ran.err, ran.err
            assert PASSWORD not in ran.err
            assert ctl.alive()
            # One line per retry step, and nothing else complains meanwhile.
            noisy = [
                line
                for line in ctl.lines
                if line.get("level") in ("warning", "error")
                and line.get("event") != "redis_unavailable"
            ]
            assert not noisy, noisy

            await asyncio.to_thread(redis.start)

            async def serving() -> None:
                assert await ctl.serving() == (SERVING, SERVING)

            await ports.eventually(serving, timeout=WAIT_S)
            back = await ctl.logged("redis_available")
            assert (
                back and back[-1]["attempts"] >= 3 and back[-1]["variable"] == redis_link.VARIABLE
            )
            await apply(ctl, cs.document(swarm, seats=seats, legacy=True))

            async def ready() -> None:
                status, body = await ctl.readyz()
                assert status == 200, body

            await ports.eventually(ready, timeout=WAIT_S)
            r = redis_link.connect(redis.url)
            try:
                await ports.eventually(lambda: launched(r, swarm, seats, 1), timeout=WAIT_S)
                fail_pod(emulator, swarm, keys.execution_id(swarm, "eng-1", 1))
                await ports.eventually(lambda: launched(r, swarm, ("eng-1",), 2), timeout=WAIT_S)
            finally:
                await r.aclose()
            assert pods_of(emulator, swarm) == sorted(
                [keys.execution_id(swarm, "eng-1", 2), keys.execution_id(swarm, "eng-2", 1)]
            )
            assert await ctl.stop() == 0
            assert ctl.events("stopped")
            clean_log(ctl)
    finally:
        redis.kill()


class KillRedisOnCall(collections.Counter[str]):
    """The emulator's call counter; SIGKILLs Redis when an armed call arrives (before the
    emulator answers it)."""

    armed: tuple[str, RestartableRedis] | None = None
    fired = False

    def __setitem__(self, call: str, count: int) -> None:
        super().__setitem__(call, count)
        if self.armed is not None and call == self.armed[0]:
            self.armed[1].kill()
            self.armed, self.fired = None, True


async def watch_pods(emulator: k8s_emulator.K8sEmulator, seen: list[tuple[str, str]]) -> None:
    """Every Pod event of the namespace as (type, execution), from the start."""
    async for kind, meta in k8s_emulator.follow_pods(emulator, cs.NAMESPACE):
        seen.append((kind, (meta.get("labels") or {}).get(runtime.LABEL_EXECUTION, "")))


def aof_releases(redis: RestartableRedis, swarm: str) -> collections.Counter[tuple[str, str]]:
    """(fence key, release field) of every release written into a fence, from the AOF."""
    found: collections.Counter[tuple[str, str]] = collections.Counter()
    for words in redis.writes():
        if words[0].upper() == "HSET" and words[1].startswith(keys.fence(swarm, "")):
            for field in words[2::2]:
                if field.startswith("release:"):
                    found[(words[1], field)] += 1
    return found


def aof_revocations(redis: RestartableRedis, swarm: str) -> collections.Counter[str]:
    return collections.Counter(
        words[1]
        for words in redis.writes()
        if words[0].upper() == "SET" and words[1].startswith(keys.revoked(swarm, ""))
    )


@pytest.mark.parametrize("count", [4, 40], ids=["four-seats", "storm-of-forty"])
async def test_redis_killed_mid_recovery_and_restarted_ends_with_everything_done_once(
    tmp_path: pathlib.Path, count: int
) -> None:
    """`count` seats fail at once (a storm of forty too); Redis is SIGKILLed when the first
    replacement Pod is being created (fences and decisions written, launches in flight) and
    started again on the same port with its data once the controller logged that it waits.
    Meanwhile the controller is NOT_SERVING and not ready. Afterwards: exactly one replacement
    per seat, each Pod created once (the Pod watch) and the lost ones deleted once; every
    release recorded once in its fence and each revocation written once (the AOF holds every
    write Redis ever did); one decision and one fence event per lost attempt; SERVING and ready
    again; and the loops run on: a later failure is fenced and, once chosen, replaced."""
    redis = RestartableRedis(tmp_path / "redis")
    await asyncio.to_thread(redis.start)
    swarm, seats = "outage-mid", tuple(f"eng-{i}" for i in range(1, count + 1))
    first = {s: keys.execution_id(swarm, s, 1) for s in seats}
    second = {s: keys.execution_id(swarm, s, 2) for s in seats}
    r = redis_link.connect(redis.url)
    try:
        async with k8s_emulator.serving() as emulator, controllers() as running:
            calls = KillRedisOnCall(emulator.calls)
            emulator.calls = calls
            async with recording_pods(emulator) as pod_events:
                ctl = await start_controller(controller_env(tmp_path, emulator, redis.url))
                running.append(ctl)
                document = json.loads(cs.document(swarm, seats=seats, legacy=True))
                document["accounts"] = [{"name": "acct-a", "slots": count}]
                await apply(ctl, json.dumps(document))
                await ports.eventually(lambda: launched(r, swarm, seats, 1), timeout=WAIT_S)
                calls.armed = ("create pods", redis)
                for seat in seats:
                    fail_pod(emulator, swarm, first[seat])

                async def waiting() -> None:
                    assert calls.fired
                    assert ctl.events("swarm_loop_interrupted")
                    assert ctl.events("redis_unavailable")
                    assert await ctl.serving() == (NOT_SERVING, NOT_SERVING)

                await ports.eventually(waiting, timeout=WAIT_S)
                status, body = await ctl.readyz()
                assert (status, body["reason"]) == (503, redis_link.REASON), body
                for line in ctl.events("swarm_loop_interrupted"):
                    assert line["swarm"] == swarm and line["variable"] == redis_link.VARIABLE
                await asyncio.to_thread(redis.start)
                await ports.eventually(lambda: launched(r, swarm, seats, 2), timeout=WAIT_S)

                async def ready() -> None:
                    assert await ctl.serving() == (SERVING, SERVING)
                    status, body = await ctl.readyz()
                    assert status == 200, body

                await ports.eventually(ready, timeout=WAIT_S)
                assert ctl.alive()
                assert pods_of(emulator, swarm) == sorted(second.values())
                await assert_each_pod_once(emulator, pod_events, swarm, first, second)
                fences = {
                    (keys.fence(swarm, first[s]), f"release:{k.value}")
                    for s in seats
                    for k in records.ReleaseKind
                }
                assert aof_releases(redis, swarm) == dict.fromkeys(fences, 1)
                revoked = aof_revocations(redis, swarm)
                assert len(revoked) >= 2 * len(seats) and set(revoked.values()) == {1}, revoked
                events = collections.Counter(
                    (e.kind, e.execution_id) for e in await telemetry.read(r, swarm, count=1000)
                )
                for seat in seats:
                    assert events[("fence", first[seat])] == 1, events
                    assert events[("recovery", first[seat])] == 1, events
                    decision = await reading.decision(r, swarm, first[seat])
                    assert decision is not None
                    assert decision.state is records.DecisionState.ACCEPTED
                    assert decision.replacement_execution_id == second[seat]
                # The loops run on: a later failure is fenced, and replaced once chosen.
                fail_pod(emulator, swarm, second["eng-1"])

                async def fenced_again() -> None:
                    assert await reading.fence(r, swarm, second["eng-1"]) is not None

                await ports.eventually(fenced_again, timeout=WAIT_S)
                await ctl.stub.RestoreDecision(
                    pb.RestoreDecisionRequest(
                        swarm=swarm, execution_id=second["eng-1"], choice=types_pb2.CHOICE_FRESH
                    ),
                    metadata=cs.OPERATOR,
                    timeout=WAIT_S,
                )
                await ports.eventually(lambda: launched(r, swarm, ("eng-1",), 3), timeout=WAIT_S)
                assert await ctl.stop() == 0
                clean_log(ctl)
    finally:
        await r.aclose()
        redis.kill()


async def test_after_a_redis_restart_a_standby_still_takes_over_from_a_killed_holder(
    tmp_path: pathlib.Path,
) -> None:
    """Two controllers, one holding the swarm's lease, both ready (both serve). Redis restarts
    (its data kept): both go NOT_SERVING, then SERVING again, and one of them holds the lease.
    That one is SIGKILLed: the other takes the lease over and replaces a failed worker."""
    redis = RestartableRedis(tmp_path / "redis")
    await asyncio.to_thread(redis.start)
    swarm, seats = "outage-takeover", ("eng-1", "eng-2")
    r = redis_link.connect(redis.url)
    try:
        async with k8s_emulator.serving() as emulator, controllers() as running:
            env = controller_env(tmp_path, emulator, redis.url)
            a = await start_controller(env)
            running.append(a)
            await apply(a, cs.document(swarm, seats=seats, legacy=True))
            await ports.eventually(lambda: launched(r, swarm, seats, 1), timeout=WAIT_S)
            b = await start_controller(env)
            running.append(b)

            async def held_by() -> Controller:
                """The controller holding the swarm's lease (both are ready: both serve)."""
                raw = await r.get(keys.lease(swarm))
                held = [
                    c for c in (a, b) if raw and c.events("listening")[0]["holder"] == raw.decode()
                ]
                assert len(held) == 1, raw
                for c in (a, b):
                    status, body = await c.readyz()
                    assert status == 200, body
                return held[0]

            await ports.eventually(held_by, timeout=WAIT_S)
            redis.kill()

            async def both_down() -> None:
                for c in (a, b):
                    assert await c.serving() == (NOT_SERVING, NOT_SERVING)

            await ports.eventually(both_down, timeout=WAIT_S)
            await asyncio.to_thread(redis.start)

            async def both_up() -> None:
                for c in (a, b):
                    assert await c.serving() == (SERVING, SERVING)

            await ports.eventually(both_up, timeout=WAIT_S)
            holder = await ports.eventually(held_by, timeout=WAIT_S)
            standby = b if holder is a else a
            await holder.kill()

            async def took_over() -> None:
                raw = await r.get(keys.lease(swarm))
                assert raw and raw.decode() == standby.events("listening")[0]["holder"], raw

            await ports.eventually(took_over, timeout=WAIT_S)
            fail_pod(emulator, swarm, keys.execution_id(swarm, "eng-2", 1))
            await ports.eventually(lambda: launched(r, swarm, ("eng-2",), 2), timeout=WAIT_S)
            assert await standby.stop() == 0
            clean_log(standby)
    finally:
        await r.aclose()
        redis.kill()
