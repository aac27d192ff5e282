"""An unreachable Kubernetes API server is a state, not a crash: `agentihooks-controller` as an OS
process (RUNTIME=kubernetes, through a generated kubeconfig) against the API emulator in this
process, which stops serving in the middle of a recovery (its port refuses connections, its
store is kept) and serves again on the same port. Redis is a real redis-server of its own.

Issue 10, item 3: "API server unreachable: the loop logs one line per backoff step naming what
is down, work resumes by itself when the dependency returns, with nothing lost and nothing done
twice."
"""

from __future__ import annotations

import asyncio
import collections
import pathlib

from services.common import redis_link
from services.controller.state import keys, reading
from tests.e2e import kube_cluster
from tests.e2e.test_redis_outage import (
    NOT_SERVING,
    SERVING,
    WAIT_S,
    Controller,
    apply,
    assert_each_pod_once,
    clean_log,
    controller_env,
    controllers,
    fail_pod,
    launched,
    pods_of,
    start_controller,
    watch_pods,
)
from tests.support import controller_server as cs
from tests.support import ports
from tests.support.kube.apiserver import emulator as k8s_emulator
from tests.support.redis_server import RestartableRedis

KUBECONFIG_TOKEN = "emulator-ignores-this"
"""The token in the generated kubeconfig (tests/e2e/test_controller_crash.py): never logged."""


class PauseServingOnCall(collections.Counter[str]):
    """The emulator's call counter. When the armed call arrives, the API server answers it
    503 and goes away: every connection cut, new ones refused, until `resume_serving`."""

    emulator: k8s_emulator.K8sEmulator
    armed: str | None = None
    pausing: asyncio.Task[None] | None = None

    def __setitem__(self, call: str, count: int) -> None:
        super().__setitem__(call, count)
        if self.armed is not None and call == self.armed:
            self.armed = None
            self.emulator.fail_next(call, 503)
            self.pausing = asyncio.get_running_loop().create_task(self.emulator.pause_serving())


async def gauge(ctl: Controller, name: str) -> float:
    """A gauge's value from the controller's /metrics."""
    async with (
        kube_cluster.http_session(ctl.tls) as session,
        session.get(f"{ctl.http}/metrics") as response,
    ):
        text = await response.text()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


async def test_api_server_gone_mid_recovery_and_back_replaces_the_seat_once(
    tmp_path: pathlib.Path,
) -> None:
    """A worker fails; the API server stops serving when the controller creates the
    replacement Pod (answered 503, then connections refused). The controller stays up and logs
    one `kubernetes_unavailable` line per backoff step, numbered, naming the API's host:port and
    the exception's type (never the kubeconfig's token). The API server serves again on the same
    port: `kubernetes_available`, the failed seat gets exactly one replacement, the lost Pod is
    deleted once, every Pod was created once, and the other seat is untouched."""
    redis = RestartableRedis(tmp_path / "redis")
    await asyncio.to_thread(redis.start)
    swarm, seats = "api-outage", ("eng-1", "eng-2")
    first = {s: keys.execution_id(swarm, s, 1) for s in seats}
    replacement = keys.execution_id(swarm, "eng-1", 2)
    r = redis_link.connect(redis.url)
    try:
        async with k8s_emulator.serving() as emulator, controllers() as running:
            calls = PauseServingOnCall(emulator.calls)
            calls.emulator = emulator
            emulator.calls = calls
            pod_events: list[tuple[str, str]] = []
            recorder = asyncio.create_task(watch_pods(emulator, pod_events))
            try:
                ctl = await start_controller(controller_env(tmp_path, emulator, redis.url))
                running.append(ctl)
                await apply(ctl, cs.document(swarm, seats=seats, legacy=True))
                await ports.eventually(lambda: launched(r, swarm, seats, 1), timeout=WAIT_S)
                calls.armed = "create pods"
                fail_pod(emulator, swarm, first["eng-1"])

                async def backing_off() -> None:
                    assert calls.pausing is not None and calls.pausing.done()
                    assert len(ctl.events("kubernetes_unavailable")) >= 3

                await ports.eventually(backing_off, timeout=WAIT_S)
                assert ctl.alive()
                address = emulator.url.removeprefix("http://")
                steps = ctl.events("kubernetes_unavailable")
                assert [s["attempt"] for s in steps[:3]] == [1, 2, 3], steps
                for step in steps:
                    assert step["address"] == address, step
                    assert step["level"] == "warning" and step["service"] == "controller", step
                    assert step["exception"] == "ClientConnectorError", step
                    assert step["retry_in_s"] > 0, step
                # Nothing was created or deleted while the API server was away; no recovery
                # can be done, so the controller says so: NOT_SERVING, /readyz 503, the gauge 0.
                assert pods_of(emulator, swarm) == sorted(first.values())

                async def not_serving() -> None:
                    assert await ctl.serving() == (NOT_SERVING, NOT_SERVING)
                    status, body = await ctl.readyz()
                    assert (status, body["reason"]) == (503, "kubernetes_unavailable"), body
                    assert await gauge(ctl, "agentihooks_kubernetes_available") == 0.0

                await ports.eventually(not_serving, timeout=WAIT_S)

                await emulator.resume_serving()
                await ports.eventually(lambda: launched(r, swarm, ("eng-1",), 2), timeout=WAIT_S)

                async def replaced() -> None:
                    assert pods_of(emulator, swarm) == sorted([replacement, first["eng-2"]])

                await ports.eventually(replaced, timeout=WAIT_S)
                back = await ctl.logged("kubernetes_available")
                assert back and back[-1]["attempts"] >= 3 and back[-1]["address"] == address

                async def serving_again() -> None:
                    assert await ctl.serving() == (SERVING, SERVING)
                    assert (await ctl.readyz())[0] == 200
                    assert await gauge(ctl, "agentihooks_kubernetes_available") == 1.0

                await ports.eventually(serving_again, timeout=WAIT_S)
                # A swarm loop's failed pass names the dependency once, not every step.
                interrupted = [
                    e for e in ctl.events("swarm_loop_interrupted") if e.get("dependency")
                ]
                assert all(e["dependency"] == "kubernetes" for e in interrupted), interrupted
                assert len(interrupted) <= 1, interrupted
                assert not ctl.events("pass_failed"), ctl.events("pass_failed")
                await assert_each_pod_once(
                    emulator,
                    pod_events,
                    swarm,
                    {"eng-1": first["eng-1"]},
                    {"eng-1": replacement, "eng-2": first["eng-2"]},
                )
                third = keys.execution_id(swarm, "eng-1", 3)
                assert await reading.execution(r, swarm, third) is None
                seat = await reading.seat(r, swarm, "eng-2")
                assert seat is not None and seat.current_execution_id == first["eng-2"]
                assert await ctl.stop() == 0
                clean_log(ctl)
                assert KUBECONFIG_TOKEN not in b"".join(ctl.raw).decode(errors="replace")
            finally:
                recorder.cancel()
                await asyncio.gather(recorder, return_exceptions=True)
                if calls.pausing is not None:
                    await calls.pausing
    finally:
        await r.aclose()
        redis.kill()
