"""The Kubernetes runtime's one Pod watch and one Node watch, shared by every swarm.

Issue 10, item 4: "One Pod watch and one Node watch per controller, shared by all its swarms,
feeding a cache that listing passes read instead of listing the API server each pass (a
periodic resync lists with the label selector, as informers do); connection pools sized for
the watches plus the calls." Item 3, the API-server half: the runtime says whether the API
answers, and logs one line per backoff step naming it. Everything runs through the real
kubernetes-asyncio client against the API emulator.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from services.controller.pods import classifying, kubernetes, runtime, templates
from tests.integration.test_kubernetes_runtime import NS, TOKEN, exited, spec, started, status
from tests.support import ports
from tests.support.kube.apiserver import emulator as k8s_emulator

WAIT_S = 120.0
"""A generous deadline (the machine is shared): every wait ends on the event it waits for."""
Reason = classifying.FailureReason


class Watching:
    """One swarm's watch, consumed in the background: every change it yields, in order."""

    def __init__(self, rt: kubernetes.KubernetesRuntime, swarm: str) -> None:
        self.swarm = swarm
        self.changes: list[runtime.Change] = []
        self.ended = False
        self._task = asyncio.create_task(self._consume(rt))

    async def _consume(self, rt: kubernetes.KubernetesRuntime) -> None:
        async for change in rt.watch(self.swarm):
            self.changes.append(change)
        self.ended = True

    async def woken(self, times: int) -> runtime.Change:
        """Wait for the `times`-th change; return it."""

        async def check() -> runtime.Change:
            assert len(self.changes) >= times, (self.swarm, self.changes)
            return self.changes[times - 1]

        return await ports.eventually(check, timeout=WAIT_S)

    async def aclose(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


@contextlib.asynccontextmanager
async def watching(
    rt: kubernetes.KubernetesRuntime, *swarms: str
) -> AsyncIterator[dict[str, Watching]]:
    """A watch of each swarm, each past its first wake (both shared watches have listed)."""
    watches = {swarm: Watching(rt, swarm) for swarm in swarms}
    try:
        for watch in watches.values():
            first = await watch.woken(1)
            assert first.relist and first.failed == ()
        yield watches
    finally:
        for watch in watches.values():
            await watch.aclose()


async def both_watches_open(emulator: k8s_emulator.K8sEmulator) -> None:
    """Wait until the runtime's Pod watch and Node watch are both open at the emulator (each
    is asked for once its list is in: after the first wake)."""

    async def open_() -> None:
        assert emulator.open_watches >= 2, emulator.open_watches

    await ports.eventually(open_, timeout=WAIT_S)


@pytest.fixture
async def k8s(k8s_emulator: k8s_emulator.K8sEmulator) -> k8s_emulator.K8sEmulator:
    k8s_emulator.add_node("node-a")
    return k8s_emulator


@contextlib.asynccontextmanager
async def runtime_of(
    api_client: Any, **options: Any
) -> AsyncIterator[kubernetes.KubernetesRuntime]:
    rt = kubernetes.KubernetesRuntime(api_client, NS, templates.default_pod_template(), **options)
    try:
        yield rt
    finally:
        await rt.aclose()


def pod(swarm: str) -> str:
    """The name of the swarm's one Pod in these tests."""
    return templates.pod_name(swarm, "e-42")


def attempt(swarm: str, failure: Reason | None, *, alive: bool) -> runtime.Attempt:
    return runtime.Attempt(swarm, "eng-2", "e-42", 1, failure, alive=alive)


async def test_sixty_swarms_open_one_pod_watch_and_one_node_watch_and_calls_never_wait(
    k8s: k8s_emulator.K8sEmulator,
) -> None:
    """60 swarms watched by one runtime hold exactly one "watch pods" and one "watch nodes",
    and none of the calls' connections: through a calls pool of 2 connections (one watch per
    swarm would have taken them all at once), a create and a list complete."""
    configuration = client.Configuration(host=k8s.url)
    configuration.connection_pool_maxsize = 2
    calls = client.ApiClient(configuration)
    try:
        async with runtime_of(calls) as rt:
            swarms = [f"swarm-{n:02d}" for n in range(60)]
            async with watching(rt, *swarms):
                await both_watches_open(k8s)
                assert (k8s.calls["watch pods"], k8s.calls["watch nodes"]) == (1, 1)
                assert k8s.open_watches == 2
                await asyncio.wait_for(rt.launch(spec(swarm="swarm-07")), WAIT_S)
                core = client.CoreV1Api(calls)
                listed = await asyncio.wait_for(
                    core.list_namespaced_pod(NS, label_selector="agentihooks.io/swarm=swarm-07"),
                    WAIT_S,
                )
                assert [p.metadata.name for p in listed.items] == [
                    templates.pod_name("swarm-07", "e-42")
                ]
                assert (k8s.calls["watch pods"], k8s.calls["watch nodes"]) == (1, 1)
    finally:
        await calls.close()


async def test_after_the_first_sync_listing_many_swarms_makes_no_list_call(
    k8s: k8s_emulator.K8sEmulator,
) -> None:
    """Once the shared watches have listed, `list_attempts` of every swarm reads their cache:
    no "list pods" or "list nodes" call, and what it reads follows the watch (a failure the
    watch delivered is listed, classified)."""
    swarms = [f"swarm-{n:02d}" for n in range(20)]
    async with runtime_of(k8s.api_client) as rt:
        for swarm in swarms:
            await started(rt, k8s, spec(swarm=swarm))
        async with watching(rt, swarms[0]) as watches:
            lists = (k8s.calls["list pods"], k8s.calls["list nodes"])
            assert lists == (1, 1)
            for swarm in swarms:
                assert await rt.list_attempts(swarm) == [attempt(swarm, None, alive=True)]
            k8s.set_pod_status(NS, pod(swarms[0]), status("Failed", exited(1)))
            await watches[swarms[0]].woken(2)
            assert await rt.list_attempts(swarms[0]) == [
                attempt(swarms[0], Reason.APPLICATION_EXIT, alive=False)
            ]
            assert (k8s.calls["list pods"], k8s.calls["list nodes"]) == lists


async def test_each_version_of_a_pod_is_read_once_however_often_it_is_listed(
    k8s: k8s_emulator.K8sEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resync classifies from what the watch read: each version of a Pod is read once, as the
    watch shows it, and a list only weighs that against the nodes and the time. So listing
    again reads no Pod again, and a node going NotReady under an unchanged Pod still lists it
    node_lost; a new version of the Pod is read again, once."""
    reads: list[str] = []
    evidence = classifying.evidence

    def counted(found: classifying.Pod) -> classifying.Evidence:
        reads.append(found.get("metadata", {}).get("name", ""))
        return evidence(found)

    monkeypatch.setattr(classifying, "evidence", counted)
    async with runtime_of(k8s.api_client) as rt:
        await started(rt, k8s, spec(swarm="alpha"))
        async with watching(rt, "alpha") as watches:
            read = len(reads)
            for _ in range(3):
                assert await rt.list_attempts("alpha") == [attempt("alpha", None, alive=True)]
            assert len(reads) == read
            k8s.set_node_ready("node-a", None)
            await watches["alpha"].woken(2)
            assert await rt.list_attempts("alpha") == [
                attempt("alpha", Reason.NODE_LOST, alive=True)
            ]
            assert len(reads) == read
            k8s.set_pod_status(NS, pod("alpha"), status("Failed", exited(1)))
            await watches["alpha"].woken(3)
            for _ in range(3):
                assert await rt.list_attempts("alpha") == [
                    attempt("alpha", Reason.APPLICATION_EXIT, alive=False)
                ]
            assert reads[read:] == [pod("alpha")]


async def test_a_failed_pod_wakes_only_its_swarms_watch(k8s: k8s_emulator.K8sEmulator) -> None:
    """A worker's failure goes to the watches of its own swarm, with the attempt in hand; the
    other swarm's watch hears nothing of it (its next change holds only its own failure)."""
    async with runtime_of(k8s.api_client) as rt:
        for swarm in ("alpha", "beta"):
            await started(rt, k8s, spec(swarm=swarm))
        async with watching(rt, "alpha", "beta") as watches:
            k8s.set_pod_status(NS, pod("alpha"), status("Failed", exited(2)))
            change = await watches["alpha"].woken(2)
            assert change.failed == (attempt("alpha", Reason.APPLICATION_EXIT, alive=False),)
            k8s.set_pod_status(NS, pod("beta"), status("Failed", exited(3)))
            change = await watches["beta"].woken(2)
            assert change == runtime.Change(
                failed=(attempt("beta", Reason.APPLICATION_EXIT, alive=False),), relist=False
            )
            assert len(watches["alpha"].changes) == 2


async def test_a_node_going_not_ready_wakes_the_swarms_with_pods_on_it(
    k8s: k8s_emulator.K8sEmulator,
) -> None:
    """node_lost needs the Node: a node going NotReady asks the swarms with Pods on it for a
    listing pass (which then reads node_lost), and no other swarm."""
    k8s.add_node("node-b")
    async with runtime_of(k8s.api_client) as rt:
        for swarm in ("alpha", "beta", "gamma"):
            await started(rt, k8s, spec(swarm=swarm))
        k8s.bind_pod(NS, pod("beta"), "node-b")
        async with watching(rt, "alpha", "beta", "gamma") as watches:
            k8s.set_node_ready("node-a", None)
            for swarm in ("alpha", "gamma"):
                change = await watches[swarm].woken(2)
                assert change.relist and change.failed == ()
                assert await rt.list_attempts(swarm) == [
                    attempt(swarm, Reason.NODE_LOST, alive=True)
                ]
            k8s.set_pod_status(NS, pod("beta"), status("Failed", exited(1)))
            change = await watches["beta"].woken(2)
            assert change == runtime.Change(
                failed=(attempt("beta", Reason.APPLICATION_EXIT, alive=False),), relist=False
            )


@pytest.mark.parametrize("gone_as_status", [False, True], ids=["error-event", "http-410"])
async def test_410_gone_lists_once_and_misses_nothing(gone_as_status: bool) -> None:
    """A watch from a compacted resourceVersion gets 410 Gone: the runtime lists once (one
    "list pods" for every swarm), asks every swarm for a listing pass, and the change it never
    saw as an event is in the cache; then it watches on."""
    async with (
        k8s_emulator.serving(gone_as_status=gone_as_status) as k8s,
        runtime_of(k8s.api_client) as rt,
    ):
        k8s.add_node("node-a")
        for swarm in ("alpha", "beta"):
            await started(rt, k8s, spec(swarm=swarm))
        async with watching(rt, "alpha", "beta") as watches:
            lists = k8s.calls["list pods"]
            k8s.miss_pod_status(NS, pod("alpha"), status("Failed", exited(1)))
            k8s.compact()
            k8s.drop_watches()
            for watch in watches.values():
                change = await watch.woken(2)
                assert change.relist
            assert k8s.calls["list pods"] == lists + 1
            assert await rt.list_attempts("alpha") == [
                attempt("alpha", Reason.APPLICATION_EXIT, alive=False)
            ]
            k8s.set_pod_status(NS, pod("beta"), status("Failed", exited(2)))
            change = await watches["beta"].woken(3)
            assert change.failed == (attempt("beta", Reason.APPLICATION_EXIT, alive=False),)
            assert k8s.calls["list pods"] == lists + 1


async def test_an_event_the_watch_never_delivered_is_seen_after_the_resync(
    k8s: k8s_emulator.K8sEmulator,
) -> None:
    """A change no watch event told of (a lost event) is found by the periodic resync, which
    lists with the label selector and wakes the swarm as the event would have."""
    async with runtime_of(k8s.api_client, resync_period=1.0) as rt:
        await started(rt, k8s, spec())
        async with watching(rt, "example") as watches:
            k8s.miss_pod_status(NS, pod("example"), status("Failed", exited(1)))
            changes = watches["example"].changes

            async def told() -> None:
                assert any(c.failed for c in changes), changes

            await ports.eventually(told, timeout=WAIT_S)
            [change] = [c for c in changes if c.failed]
            assert change.failed == (attempt("example", Reason.APPLICATION_EXIT, alive=False),)
            assert k8s.calls["list pods"] >= 2  # the first list and the resync that found it


async def test_a_broken_watch_makes_readers_list_until_it_is_back(
    k8s: k8s_emulator.K8sEmulator,
) -> None:
    """While the Pod watch is dropped and cannot come back, `list_attempts` lists the API
    server itself (the cache may be stale); once the watch is back it reads the cache again,
    and the change made meanwhile has reached it."""
    async with runtime_of(k8s.api_client) as rt:
        name = await started(rt, k8s, spec())
        async with watching(rt, "example"):
            k8s.fail_next("watch pods", 503, times=10_000)
            k8s.drop_watches(abrupt=True)
            k8s.set_pod_status(NS, name, status("Failed", exited(2)))

            async def listing() -> None:
                before = k8s.calls["list pods"]
                assert await rt.list_attempts("example") == [
                    attempt("example", Reason.APPLICATION_EXIT, alive=False)
                ]
                assert k8s.calls["list pods"] == before + 1

            await ports.eventually(listing, timeout=WAIT_S)
            k8s.clear_faults("watch pods")

            async def cached() -> None:
                before = k8s.calls["list pods"]
                assert await rt.list_attempts("example") == [
                    attempt("example", Reason.APPLICATION_EXIT, alive=False)
                ]
                assert k8s.calls["list pods"] == before

            await ports.eventually(cached, timeout=WAIT_S)


async def test_the_runtime_says_whether_the_api_answers_and_logs_each_backoff_step(
    k8s: k8s_emulator.K8sEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    """The API server goes away: `api_available` turns False, subscribers (plain and coroutine
    functions) hear it once, and the watches log one `kubernetes_unavailable` line per backoff
    step naming the API's host:port; it comes back: True, `kubernetes_available`, and the watch
    delivers what changed meanwhile."""
    heard: list[bool] = []
    awaited: list[bool] = []

    async def told(available: bool) -> None:
        awaited.append(available)

    caplog.set_level(logging.INFO, logger="services.controller.pods.availability")
    async with runtime_of(k8s.api_client) as rt:
        assert rt.api_available is None
        rt.subscribe(heard.append)
        rt.subscribe(told)
        await started(rt, k8s, spec())
        assert rt.api_available is True
        async with watching(rt, "example") as watches:
            await k8s.pause_serving()

            def steps() -> list[dict[str, Any]]:
                return [
                    fields
                    for record in caplog.records
                    if (fields := getattr(record, "fields", {})).get("event")
                    == "kubernetes_unavailable"
                ]

            async def backing_off() -> None:
                assert rt.api_available is False
                assert len(steps()) >= 3

            await ports.eventually(backing_off, timeout=WAIT_S)
            port = k8s.url.rsplit(":", 1)[1]
            assert [s["attempt"] for s in steps()[:3]] == [1, 2, 3]
            for step in steps():
                assert step["address"] == f"127.0.0.1:{port}"
                assert step["exception"] == "ClientConnectorError", step
                assert step["retry_in_s"] > 0
            # A change made while nobody could watch: the watch resumes and delivers it.
            k8s.set_pod_status(NS, pod("example"), status("Failed", exited(1)))
            await k8s.resume_serving()

            async def back() -> None:
                assert rt.api_available is True
                assert (heard, awaited) == ([True, False, True], [True, False, True])

            await ports.eventually(back, timeout=WAIT_S)
            [line] = [
                fields
                for r in caplog.records
                if (fields := getattr(r, "fields", {})).get("event") == "kubernetes_available"
                and "attempts" in fields
            ]
            assert line["attempts"] >= 3 and line["address"] == f"127.0.0.1:{port}"

            async def delivered() -> None:
                assert any(
                    c.failed == (attempt("example", Reason.APPLICATION_EXIT, alive=False),)
                    for c in watches["example"].changes
                )

            await ports.eventually(delivered, timeout=WAIT_S)
    assert TOKEN not in caplog.text


async def test_aclose_stops_every_watch_and_closes_the_watch_client(
    k8s: k8s_emulator.K8sEmulator,
) -> None:
    """`aclose` ends every swarm's watch, stops both shared watches (no task left, no watch
    open at the API server) and closes their connection pool; a watch asked for afterwards
    ends at once, and `list_attempts` lists the API server."""
    rt = kubernetes.KubernetesRuntime(k8s.api_client, NS, templates.default_pod_template())
    await started(rt, k8s, spec())
    watches = {swarm: Watching(rt, swarm) for swarm in ("alpha", "beta", "example")}
    try:
        for watch in watches.values():
            await watch.woken(1)
        await both_watches_open(k8s)
        watch_client = rt._watch_client
        assert watch_client is not None
        await rt.aclose()

        async def ended() -> None:
            assert all(w.ended for w in watches.values())
            assert k8s.open_watches == 0

        await ports.eventually(ended, timeout=WAIT_S)
        assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("kubernetes-")]
        assert watch_client.rest_client.pool_manager.closed
        async for _ in rt.watch("example"):
            raise AssertionError("a watch after aclose yielded")
        before = k8s.calls["list pods"]
        assert await rt.list_attempts("example") == [attempt("example", None, alive=True)]
        assert k8s.calls["list pods"] == before + 1
        assert (k8s.calls["watch pods"], k8s.calls["watch nodes"]) == (1, 1)
    finally:
        for watch in watches.values():
            await watch.aclose()
        await rt.aclose()
