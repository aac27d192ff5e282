"""The watch's fast path, end to end: the real controller on the Kubernetes API emulator acts on
a failure the Pod watch reports without listing the swarm (issue 3: "watch them between passes
so a failure is acted on within a second"), and the listing pass still runs as the backstop."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator

import pytest

from services.controller.state import keys, reading, records
from tests.support import controller_server as cs
from tests.support import ports, redis_server
from tests.support.kube.apiserver import emulator as k8s_emulator

FIRST, SECOND = "example.eng-2.1", "example.eng-2.2"
WAIT_S = 120.0
"""A generous deadline (the machine is shared): the waits end on the event."""


@pytest.fixture
async def slow_passes(
    tmp_path: pathlib.Path,
    redis_server: redis_server.RedisServer,
    k8s_emulator: k8s_emulator.K8sEmulator,
) -> AsyncIterator[cs.Controller]:
    """A controller whose listing passes run only every 600 s (after the first ones), longer than
    any wait of these tests: whatever happens in them was the watch's doing."""
    root = await cs.empty_state(redis_server.url, tmp_path)
    ctl, server = await cs.start_controller(
        redis_server.url, k8s_emulator, root, pass_interval_s=600.0
    )
    try:
        yield ctl
    finally:
        await cs.stop_controller(ctl, server)


async def test_a_failure_the_watch_reports_is_recovered_without_listing_the_swarm(
    slow_passes: cs.Controller,
) -> None:
    """A worker OOMKilled between passes is fenced, released, decided and replaced from the
    watch event alone: no list call and no listing pass (the replacement comes long before
    the next one could), and the lost Pod deleted once its replacement exists. How fast is
    measured by bench/reconcile.py, not here. (Legacy spawns: "Limitations" replaces them fresh
    without a choice.)"""
    ctl = slow_passes
    before = await applied(ctl, cs.document(legacy=True))
    lists = ctl.emulator.calls["list pods"]
    ctl.fail(FIRST, cs.terminated("OOMKilled", 137))
    await cs.wait_for_pod(ctl, SECOND, timeout=WAIT_S)
    assert ctl.emulator.calls["list pods"] == lists, "the fast path listed the swarm"
    assert passes(ctl) == before, "a listing pass ran"
    fence = await reading.fence(ctl.redis, "example", FIRST)
    assert fence is not None and fence.reason == "oom_killed"
    assert {r.kind for r in fence.releases} >= set(records.AUTHORITY_RELEASES)

    async def lost_pod_gone() -> None:
        assert ctl.pod_of(FIRST) is None
        found = await reading.fence(ctl.redis, "example", FIRST)
        assert found is not None and found.released(records.ReleaseKind.POD)

    await ports.eventually(lost_pod_gone, timeout=WAIT_S)
    assert ctl.emulator.calls["list pods"] == lists
    assert passes(ctl) == before
    metrics = (await ctl.hub.render_metrics()).decode()
    assert 'agentihooks_watch_fences_total{swarm="example"} 1.0' in metrics
    # One replacement, and the other seat untouched.
    seat = await reading.seat(ctl.redis, "example", "eng-2")
    assert seat is not None and seat.current_execution_id == SECOND
    third = keys.execution_id("example", "eng-2", 3)
    assert await reading.execution(ctl.redis, "example", third) is None
    assert ctl.pod_of("example.eng-1.1") is not None


async def test_a_worker_deleted_from_under_the_controller_wakes_a_listing_pass(
    slow_passes: cs.Controller,
) -> None:
    """A Pod deleted from outside leaves no failed status on the watch: that is for a listing
    pass, and the watch wakes one at once, long before the next one is due. The pass fences the
    attempt from the last state the watch saw (a Pod that never finished: application_exit)."""
    ctl = slow_passes
    before = await applied(ctl, cs.document())
    pod = ctl.pod_of(FIRST)
    assert pod is not None
    ctl.emulator.delete("pods", pod["metadata"]["name"], cs.NAMESPACE)

    async def fenced() -> None:
        assert passes(ctl) > before
        fence = await reading.fence(ctl.redis, "example", FIRST)
        assert fence is not None and fence.reason == "application_exit"

    # Long before the next pass is due (600 s): the watch woke this one.
    await ports.eventually(fenced, timeout=WAIT_S)


def passes(ctl: cs.Controller) -> float:
    """How many listing passes of the swarm have run (they read the shared watches' cache,
    so list calls do not count them)."""
    return float(ctl.hub.metrics.pass_seconds.count("example"))


async def applied(ctl: cs.Controller, document: str) -> float:
    """Apply the swarm and wait until its first attempts run settled, the watch is open and no
    listing pass has started for a while; the number of listing passes so far."""
    await ctl.apply(document)
    await cs.wait_for_pod(ctl, FIRST, timeout=WAIT_S)

    async def settled() -> None:
        assert await reading.attention(ctl.redis, "example") == []
        assert ctl.emulator.open_watches >= 1

    await ports.eventually(settled, timeout=WAIT_S)
    return await quiet(ctl)


async def quiet(ctl: cs.Controller) -> float:
    """Wait until no listing pass has started for a while; the number of passes so far."""
    while True:
        count = passes(ctl)
        await asyncio.sleep(0.3)
        if passes(ctl) == count:
            return count
