"""The controller as a separate OS process, SIGKILLed at every write of one recovery in turn.

DESIGN 3: "Every step is idempotent and records that it happened (the fence lists each release),
so a controller killed between any two writes and restarted finishes the work without doing any
of it twice." Issue 3 asks for exactly this test. The controller runs as `python -m
services.controller.main` with RUNTIME=kubernetes against the API emulator in this process
(through a generated kubeconfig) and a real redis-server. The kill comes from the test-only
failpoint of `services.controller.state.failpoints` (AGENTIHOOKS_FAULT_KILL_AFTER_WRITES /
_BEFORE_WRITES), or from the emulator's side for the one runtime step that no write follows at
once (the Pod created, its credential Secret not yet). Each run recovers its own swarm, so runs
share one Redis, one emulator and one controller history; Redis MONITOR and a Pod watch record
what every controller did.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import dataclasses
import json
import os
import pathlib
import signal
import sys
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import grpc
import pytest
import redis.asyncio as aioredis
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import recovery_pb2_grpc as pb_grpc
from agentihooks.swarm.v2 import types_pb2

from services.common import tls, tls_settings
from services.controller import telemetry
from services.controller.pods import runtime, templates
from services.controller.state import failpoints, keys, reading, records
from tests.e2e import kube_cluster
from tests.support import controller_server as cs
from tests.support import ports, redis_server
from tests.support.kube.apiserver import emulator as k8s_emulator

SEAT = "eng-1"
ROOT = pathlib.Path(__file__).resolve().parents[2]
NEVER = "1000000"
WAIT_S = 180.0
"""A generous deadline for what takes a second or two here: these tests run controller
processes beside the rest of the suite on a shared two-core machine (waits end on the event,
the deadline only bounds a failure)."""
"""An armed failpoint that never fires: the clean run lists its writes in the log."""
RUNTIME_EFFECT_FIRST = {
    ("release", "pod"),
    ("launched", None),
    ("launched", "pod"),
    ("outcome", None),
}
"""Writes preceded by an effect the write records (Pod removed, Pod created, both, a report
received): killing right before them is a distinct crash from killing after the previous one."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """Where one run's first controller dies."""

    name: str
    env: Mapping[str, str]
    kills: bool
    emulator_call: str | None = None


@dataclasses.dataclass
class Process:
    """One controller OS process and what it logged."""

    proc: asyncio.subprocess.Process
    stub: pb_grpc.RecoveryStub
    channel: grpc.aio.Channel
    http: str
    lines: list[dict[str, Any]]
    reader: asyncio.Task[None]
    holder: str = ""
    tls: tls_settings.TLSSettings = tls_settings.PLAINTEXT
    """How the test dials it: with the CA of its environment."""

    def alive(self) -> bool:
        return self.proc.returncode is None

    async def passes(self, swarm: str) -> float:
        """How many recovery passes of `swarm` this process finished (its /metrics)."""
        async with (
            kube_cluster.http_session(self.tls) as session,
            session.get(f"{self.http}/metrics") as response,
        ):
            text = await response.text()
        name = f'agentihooks_recovery_pass_seconds_count{{swarm="{swarm}"}}'
        found = [line.split()[-1] for line in text.splitlines() if line.startswith(name)]
        return float(found[0]) if found else 0.0


class KillOnCall(collections.Counter[str]):
    """The emulator's call counter; SIGKILLs a controller when a chosen call arrives."""

    target: tuple[str, int] | None = None

    def __setitem__(self, call: str, count: int) -> None:
        super().__setitem__(call, count)
        if self.target is not None and call == self.target[0]:
            os.kill(self.target[1], signal.SIGKILL)
            self.target = None


@dataclasses.dataclass
class Lab:
    """The shared parts: emulator, Redis, the controller environment and the recorders."""

    emulator: k8s_emulator.K8sEmulator
    redis: aioredis.Redis
    env: dict[str, str]
    calls: KillOnCall
    lua: list[list[str]] = dataclasses.field(default_factory=list)
    markers: set[str] = dataclasses.field(default_factory=set)
    pod_events: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)
    running: list[Process] = dataclasses.field(default_factory=list)
    recorders: list[asyncio.Task[None]] = dataclasses.field(default_factory=list)

    async def start(self, armed: Mapping[str, str]) -> Process:
        """Start a controller process; return once it serves (gRPC and HTTP listening)."""
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
            env={**self.env, **armed},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        lines: list[dict[str, Any]] = []
        listening = asyncio.Event()

        async def read() -> None:
            assert proc.stderr is not None
            async for raw in proc.stderr:
                try:
                    line = json.loads(raw)
                except ValueError:
                    line = {"raw": raw.decode(errors="replace")}
                lines.append(line)
                if line.get("event") == "listening":
                    listening.set()
            listening.set()

        reader = asyncio.create_task(read())
        client = kube_cluster.client_of(self.env)
        channel = tls.channel(f"127.0.0.1:{grpc_port}", client)
        p = Process(
            proc,
            pb_grpc.RecoveryStub(channel),
            channel,
            kube_cluster.http_base(client, http_port),
            lines,
            reader,
            tls=client,
        )
        self.running.append(p)
        await asyncio.wait_for(listening.wait(), WAIT_S)
        assert p.alive(), f"the controller did not start: {lines[-5:]}"
        listened = next((line for line in lines if line.get("event") == "listening"), None)
        assert listened is not None, f"the controller did not start: {lines[-5:]}"
        p.holder = str(listened["holder"])
        # It serves as the test dials it (TLS when the environment names a certificate).
        assert listened["transport"] == tls_settings.transport(client), listened
        return p

    async def retire(self, p: Process) -> None:
        """End an idle controller (everything settled, nothing in flight) with SIGKILL.

        Not SIGTERM: a clean stop sometimes hangs 10 s (the hub's stop timeout) because the
        lease renewer loses its cancellation inside a redis-py call and keeps renewing. A kill
        costs only the lease expiry, which the next controller's start-up covers.
        """
        if p.alive():
            p.proc.kill()
        await asyncio.wait_for(p.proc.wait(), WAIT_S)
        await p.reader
        await p.channel.close()
        self.running.remove(p)

    async def killed(self, p: Process) -> None:
        """Wait for a process the failpoint kills; it must die of SIGKILL."""
        await asyncio.wait_for(p.proc.wait(), WAIT_S)
        await p.reader
        await p.channel.close()
        self.running.remove(p)
        assert p.proc.returncode == -signal.SIGKILL, (p.proc.returncode, p.lines[-5:])

    async def caught_up(self, tag: str) -> None:
        """Wait until both recorders have seen everything done before now (a marker each)."""
        marker = f"crash-marker-{tag}"
        await self.redis.echo(marker)
        pod = {"metadata": {"name": marker, "labels": {"crash-test/marker": tag}}}
        self.emulator.create("pods", pod, namespace=cs.NAMESPACE)

        async def seen() -> None:
            for recorder in self.recorders:
                # A recorder that stopped would leave the wait to its deadline: say why now.
                assert not recorder.done(), (recorder.get_name(), recorder)
            assert marker in self.markers
            assert any(name == marker for _, _, name in self.pod_events)

        await ports.eventually(seen, timeout=WAIT_S)

    async def monitor(self) -> None:
        """Every command Lua ran on Redis (MONITOR), as words; and the markers."""
        async with self.redis.monitor() as m:
            while True:
                info = await m.next_command()
                words = info["command"].split(" ")
                if info["client_type"] == "lua":
                    self.lua.append([words[0].upper(), *words[1:]])
                elif words[0].upper() == "ECHO" and len(words) > 1:
                    self.markers.add(words[1])

    async def watch_pods(self) -> None:
        """Every Pod event of the namespace as (type, execution label, name), from the start
        (watched again when the server ends a watch: a long, loaded run outlives one)."""
        async for kind, meta in k8s_emulator.follow_pods(self.emulator, cs.NAMESPACE):
            execution = (meta.get("labels") or {}).get(runtime.LABEL_EXECUTION, "")
            self.pod_events.append((kind, execution, meta["name"]))


def kubeconfig(path: pathlib.Path, server: str) -> pathlib.Path:
    """A kubeconfig naming the emulator (plain HTTP, a token the emulator ignores)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "emulator", "cluster": {"server": server}}],
        "users": [{"name": "controller", "user": {"token": "emulator-ignores-this"}}],
        "contexts": [
            {
                "name": "emulator",
                "context": {"cluster": "emulator", "user": "controller", "namespace": "agents"},
            }
        ],
        "current-context": "emulator",
    }
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


async def declare(lab: Lab, p: Process, swarm: str) -> None:
    """Apply a one-seat legacy-spawn swarm and wait until its first Pod runs, settled."""
    doc = cs.document(swarm, seats=(SEAT,), automation=True, legacy=True)
    await p.stub.ApplySwarm(pb.ApplySwarmRequest(document=doc), metadata=cs.OPERATOR)

    async def settled() -> None:
        first = await reading.execution(lab.redis, swarm, keys.execution_id(swarm, SEAT, 1))
        assert first is not None and first.launched
        assert await reading.attention(lab.redis, swarm) == []

    await ports.eventually(settled, timeout=WAIT_S)


async def report(lab: Lab, p: Process, swarm: str, execution: str) -> pb.RestoreReportAck:
    """ReportRestore with the credential from the replacement's own Secret: fresh, as directed."""
    secret = lab.emulator.get("secrets", templates.secret_name(swarm, execution), cs.NAMESPACE)
    assert secret is not None, "the replacement has no credential Secret"
    token = base64.b64decode(secret["data"][templates.CREDENTIAL_KEY]).decode()
    outcome = types_pb2.RestoreOutcome(execution_id=execution, recovery=types_pb2.CONTINUITY_FRESH)

    async def stream() -> AsyncIterator[pb.RestoreReport]:
        yield pb.RestoreReport(progress=pb.RestoreProgress(step="verify", status="skipped"))
        yield pb.RestoreReport(outcome=outcome)

    ack: pb.RestoreReportAck = await p.stub.ReportRestore(
        stream(), metadata=cs.md(token), timeout=WAIT_S
    )
    return ack


@dataclasses.dataclass
class Run:
    """What one run ended with."""

    survivor: Process
    kills: int
    ack: pb.RestoreReportAck
    writes: list[dict[str, Any]]


async def recover(lab: Lab, swarm: str, plan: Plan) -> Run:
    """Fail the seat's Pod under a controller armed by `plan`; restart it after its SIGKILL;
    report the replacement's outcome (again after a kill); return once all is settled."""
    first, second = (keys.execution_id(swarm, SEAT, g) for g in (1, 2))
    p = await lab.start(plan.env)
    armed = p
    if plan.emulator_call is not None:
        lab.emulator.fail_next(plan.emulator_call, 503)
        lab.calls.target = (plan.emulator_call, p.proc.pid)
    lab.emulator.set_pod_status(
        cs.NAMESPACE, templates.pod_name(swarm, first), cs.terminated("Error", 1)
    )
    kills, ack = 0, None
    deadline = time.monotonic() + WAIT_S
    while True:
        assert time.monotonic() < deadline, await stuck(lab, p, swarm, plan, ack)
        if not p.alive():
            await lab.killed(p)
            kills += 1
            p = await lab.start({})
            continue
        replacement = await reading.execution(lab.redis, swarm, second)
        fence = await reading.fence(lab.redis, swarm, first)
        # The replacement reports once it is launched and the lost Pod is gone (a real one
        # restores for seconds first), so the writes of a clean run come in one order.
        if (
            ack is None
            and replacement is not None
            and replacement.launched
            and fence is not None
            and fence.released(records.ReleaseKind.POD)
        ):
            try:
                ack = await report(lab, p, swarm, second)
            except grpc.aio.AioRpcError as exc:
                # The controller died during the call, or the restarted one is not the lease
                # holder yet (a standby answers UNAVAILABLE and writes nothing): report again.
                assert exc.code() is grpc.StatusCode.UNAVAILABLE, (plan.name, exc)
                await asyncio.sleep(0.05)
            continue
        if ack is not None and await reading.attention(lab.redis, swarm) == []:
            break
        await asyncio.sleep(0.02)
    if plan.kills and kills == 0:
        # Killed by its last write (after the state above was already complete).
        await lab.killed(p)
        kills += 1
        p = await lab.start({})
    # At least two whole passes by the survivor after the state was complete: nothing more.
    before = await p.passes(swarm)

    async def passed() -> None:
        assert await p.passes(swarm) >= before + 2

    await ports.eventually(passed, timeout=WAIT_S)
    writes = [
        line
        for line in armed.lines
        if line.get("event") == "failpoint_write" and line.get("lease_key") == keys.lease(swarm)
    ]
    return Run(p, kills, ack, writes)


async def stuck(
    lab: Lab, p: Process, swarm: str, plan: Plan, ack: pb.RestoreReportAck | None
) -> str:
    """What a run that did not finish looked like (for the assertion message)."""
    logged = [line for line in p.lines if line.get("logger") != "aiohttp.access"]
    return (
        f"{plan.name}: the recovery did not finish: alive={p.alive()} holder={p.holder} "
        f"lease={await lab.redis.get(keys.lease(swarm))!r} ack={ack is not None} "
        f"attention={await reading.attention(lab.redis, swarm)} last lines={logged[-15:]}"
    )


async def check(lab: Lab, swarm: str, run: Run, where: str) -> None:
    """One fence, each release once, one decision, one replacement Pod, awaiting restored."""
    first, second = (keys.execution_id(swarm, SEAT, g) for g in (1, 2))
    await lab.caught_up(swarm)
    r = lab.redis
    assert len(await r.keys(keys.fence(swarm, "*"))) == 1, where
    fence = await reading.fence(r, swarm, first)
    assert fence is not None and fence.reason == "application_exit", where
    assert sorted(x.kind for x in fence.releases) == sorted(records.ReleaseKind), where
    lua = [w for w in lab.lua if len(w) > 1 and "{" + swarm + "}" in w[1]]
    fence_key, decision_key = keys.fence(swarm, first), keys.decision(swarm, first)
    release_fields = collections.Counter(
        w[2] for w in lua if w[0] == "HSET" and w[1] == fence_key and w[2].startswith("release:")
    )
    assert release_fields == {f"release:{k.value}": 1 for k in records.ReleaseKind}, where
    held = await reading.execution(r, swarm, first)
    assert held is not None and held.restore_grant_id is None, where
    revoked = collections.Counter(w[1] for w in lua if w[0] == "SET" and ":revoked:" in w[1])
    wanted = {keys.revoked(swarm, t) for t in (held.credential_id, held.capture_grant_id)}
    assert revoked == dict.fromkeys(wanted, 1), (where, revoked)
    assert await r.keys(keys.decision(swarm, "*")) == [decision_key.encode()], where
    assert sum(1 for w in lua if w[0] == "HSET" and w[1] == decision_key) == 1, where
    decision = await reading.decision(r, swarm, first)
    assert decision is not None and decision.state is records.DecisionState.ACCEPTED, where
    assert decision.choice is records.Choice.FRESH, where
    assert decision.source is records.DecisionSource.LEGACY_SPAWN, where
    assert decision.replacement_execution_id == second, where
    # Exactly one replacement Pod: the only Pod of the swarm left, created once.
    pods = [
        pod["metadata"]["labels"][runtime.LABEL_EXECUTION]
        for pod in lab.emulator.objects("pods", cs.NAMESPACE)
        if (pod["metadata"].get("labels") or {}).get(runtime.LABEL_SWARM) == swarm
    ]
    assert pods == [second], (where, pods)
    seen = collections.Counter(
        (t, e) for t, e, _ in lab.pod_events if e in (first, second) and t != "MODIFIED"
    )
    assert seen == {("ADDED", first): 1, ("DELETED", first): 1, ("ADDED", second): 1}, (
        where,
        seen,
    )
    secrets = [s["metadata"]["name"] for s in lab.emulator.objects("secrets", cs.NAMESPACE)]
    assert templates.secret_name(swarm, second) in secrets, where
    assert templates.secret_name(swarm, first) not in secrets, where
    # Telemetry: one fence and one recovery event for the lost attempt, one outcome.
    events = [(e.kind, e.execution_id) for e in await telemetry.read(r, swarm, count=1000)]
    assert sorted(events) == [("fence", first), ("outcome", second), ("recovery", first)], (
        where,
        events,
    )
    # The outcome is stored once, verified; the task's prior awaiting is back.
    outcome = await reading.outcome(r, swarm, second)
    assert outcome is not None and outcome.verified, where
    assert (await reading.restore_outcomes_by_type(r, swarm)).get("fresh") == 1, where
    assert run.ack.outcome.recovery == types_pb2.CONTINUITY_FRESH and run.ack.outcome.verified
    task = await reading.task(r, swarm, f"t-{SEAT}")
    assert task is not None and task.awaiting == "worker" and not task.held, where
    assert task.recovery is not None and task.recovery["status"] == "verified", where
    seat = await reading.seat(r, swarm, SEAT)
    assert seat is not None and seat.current_execution_id == second, where
    assert seat.state is records.SeatState.RUNNING, where
    assert len(await r.keys(keys.execution(swarm, "*"))) == 2, where


@contextlib.asynccontextmanager
async def lab_for(tmp_path: pathlib.Path, url: str) -> AsyncIterator[Lab]:
    async with k8s_emulator.serving() as emulator:
        client = aioredis.Redis.from_url(url, decode_responses=False)
        await client.flushall()
        calls = KillOnCall(emulator.calls)
        emulator.calls = calls
        env = {
            # TLS on every connection the controller serves and its workers dial.
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
            "AGENTIHOOKS_LEASE_MS": "600",
            "AGENTIHOOKS_PASS_INTERVAL_MS": "100",
        }
        lab = Lab(emulator, aioredis.Redis.from_url(url), env, calls)
        recorders = [
            asyncio.create_task(lab.monitor(), name="redis-monitor"),
            asyncio.create_task(lab.watch_pods(), name="pod-watch"),
        ]
        lab.recorders = recorders
        try:
            yield lab
        finally:
            for p in list(lab.running):
                if p.alive():
                    p.proc.kill()
                await p.proc.wait()
                await p.reader
                await p.channel.close()
            emulator.drop_watches()
            for task in recorders:
                task.cancel()
            await asyncio.gather(*recorders, return_exceptions=True)
            await lab.redis.aclose()
            await client.aclose()


def plans(clean: list[dict[str, Any]]) -> list[Plan]:
    """A kill after each write of the clean run, before each write that records a runtime
    effect, between the replacement Pod's creation and its Secret's, and between the
    replacement's launch and the lost Pod's removal."""
    out = [
        Plan(
            f"kill after write {n} ({w['script']} {w.get('kind') or ''})",
            {failpoints.KILL_AFTER_WRITES: str(n)},
            True,
        )
        for n, w in enumerate(clean, 1)
    ]
    out += [
        Plan(
            f"kill before write {n} ({w['script']} {w.get('kind') or ''})",
            {failpoints.KILL_BEFORE_WRITES: str(n)},
            True,
        )
        for n, w in enumerate(clean, 1)
        if (w["script"], w.get("kind")) in RUNTIME_EFFECT_FIRST
    ]
    out.append(Plan("kill with the Pod created, its Secret not", {}, True, "create secrets"))
    out.append(
        Plan(
            "kill with the replacement launched, the lost Pod not removed", {}, True, "delete pods"
        )
    )
    return out


@pytest.mark.slow
async def test_sigkill_after_each_write_of_a_recovery_then_restart_does_everything_once(
    tmp_path: pathlib.Path, redis_server: redis_server.RedisServer
) -> None:
    """Issue 3 (crash test) and DESIGN 3: the controller process SIGKILLed after each distinct
    write of one recovery in turn (and before each write that records a Pod's removal or
    creation or a report) and restarted; every run ends with exactly one fence, each release
    done once (revocations set once), one decision, one replacement Pod created once, no
    duplicate fence/recovery/outcome event, and once the replacement reports its outcome
    (with its own worker credential, again after a kill), the task's prior awaiting restored.
    Spec: "Each release is recorded in the fence, so a controller restart resumes where it
    stopped and never releases twice"; "A second identical report returns the stored
    outcome"; "Limitations": a superseded legacy spawn is replaced fresh without a choice."""
    async with lab_for(tmp_path, redis_server.url) as lab:
        p = await lab.start({})
        await declare(lab, p, "crash-00")
        await lab.retire(p)
        clean = await recover(
            lab, "crash-00", Plan("clean", {failpoints.KILL_AFTER_WRITES: NEVER}, False)
        )
        assert clean.kills == 0
        await check(lab, "crash-00", clean, "clean run")
        writes = clean.writes
        sequence = [(w["script"], w.get("kind"), w["status"]) for w in writes]
        assert [w["number"] for w in writes] == list(range(1, len(writes) + 1)), sequence
        authority = ",".join(k.value for k in records.AUTHORITY_RELEASES)
        assert sequence == [
            ("fence", authority, "fenced"),  # the authority releases in the same write
            ("accept", None, "accepted"),
            # the replacement's launch and the lost Pod's removal in one write
            ("launched", "pod", "launched"),
            ("outcome", None, "stored"),
        ], sequence
        stored = next(w["number"] for w in writes if w["script"] == "outcome")
        survivor = clean.survivor
        for i, plan in enumerate(plans(writes), 1):
            swarm = f"crash-{i:02d}"
            await declare(lab, survivor, swarm)
            await lab.retire(survivor)
            run = await recover(lab, swarm, plan)
            where = f"{plan.name} of {len(writes)}"
            assert run.kills == 1, where
            await check(lab, swarm, run, where)
            if plan.env.get(failpoints.KILL_AFTER_WRITES) == str(stored):
                assert run.ack.repeated, where  # stored, then killed: the repeat returns it
            survivor = run.survivor
        await lab.retire(survivor)
