"""KubernetesRuntime through the real kubernetes-asyncio client against the API emulator.

Spec, "What happens when a Pod fails": "The controller's recovery pass (Recovery.reconcile) lists
the swarm's worker Pods every pass and classifies each current attempt." DESIGN section 4: list by
label every pass, watch for a prompt reaction, create the replacement with the restorer sidecar and
its worker credential in a Secret, remove what the fenced attempt held.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes_asyncio import client

from services.controller.pods import classifying, kubernetes, runtime, templates
from tests.support import ports
from tests.support.kube.apiserver import emulator as k8s_emulator

NS = "workers"
TOKEN = "wk-7f3c9a1e-very-secret-token"
Reason = classifying.FailureReason


def spec(swarm: str = "example", seat: str = "eng-2", execution: str = "e-42", generation: int = 1):
    return runtime.LaunchSpec(
        swarm=swarm,
        seat=seat,
        execution_id=execution,
        generation=generation,
        image="registry.local/agent-worker:1.4.2",
        command=("agentihooks-restorer", "entry", "--", "claude"),
        worker_credential=TOKEN,
        env={"AGENTIHOOKS_CONTROL_ADDR": "controller:50051"},
    )


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def container(name: str, state: dict[str, Any], last: dict[str, Any] | None = None):
    """A container status as complete as the kubelet writes it (the client insists)."""
    return {
        "name": name,
        "image": "registry.local/agent-worker:1.4.2",
        "imageID": "",
        "ready": "running" in state,
        "restartCount": 0,
        "state": state,
        "lastState": last or {},
    }


RUNNING = {"running": {"startedAt": "2026-12-02T14:00:00Z"}}


def exited(code: int, reason: str = "Error") -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "reason": reason}}


def status(
    phase: str,
    worker: dict[str, Any] = RUNNING,
    *,
    sidecar: dict[str, Any] = RUNNING,
    reason: str | None = None,
    disruption: str | None = None,
    age: timedelta = timedelta(hours=1),
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "phase": phase,
        "startTime": stamp(datetime.now(UTC) - age),
        "conditions": [{"type": "Ready", "status": "True" if phase == "Running" else "False"}],
        "containerStatuses": [container("worker", worker)],
        "initContainerStatuses": [container("restorer", sidecar)],
    }
    if reason:
        body["reason"] = reason
    if disruption:
        body["conditions"].append(
            {"type": "DisruptionTarget", "status": "True", "reason": disruption}
        )
    return body


@pytest.fixture
async def k8s(k8s_emulator: k8s_emulator.K8sEmulator) -> k8s_emulator.K8sEmulator:
    k8s_emulator.add_node("node-a")
    return k8s_emulator


@pytest.fixture
async def pods(k8s: k8s_emulator.K8sEmulator) -> AsyncIterator[kubernetes.KubernetesRuntime]:
    rt = kubernetes.KubernetesRuntime(k8s.api_client, NS, templates.default_pod_template())
    yield rt
    await rt.aclose()


async def started(
    rt: kubernetes.KubernetesRuntime, k8s: k8s_emulator.K8sEmulator, s: runtime.LaunchSpec
) -> str:
    """Launch, then play scheduler and kubelet: bound to node-a and running."""
    await rt.launch(s)
    name = templates.pod_name(s.swarm, s.execution_id)
    k8s.bind_pod(NS, name, "node-a")
    k8s.set_pod_status(NS, name, status("Running"))
    return name


WAKE_S = 120.0
"""A generous deadline for a wake that comes in milliseconds on an idle machine."""


async def woken(watch: AsyncIterator[runtime.Change], timeout: float = WAKE_S) -> float:
    """Wait for the watch's next wake; returns how long it took."""
    begin = time.monotonic()
    await asyncio.wait_for(anext(watch), max(timeout, WAKE_S))
    return time.monotonic() - begin


async def test_list_returns_only_the_swarms_workers(pods, k8s) -> None:
    """The pass "lists the swarm's worker Pods": by label, only this swarm's, each an attempt."""
    await started(pods, k8s, spec(seat="eng-1", execution="e-1", generation=1))
    await started(pods, k8s, spec(seat="eng-2", execution="e-2", generation=3))
    await started(pods, k8s, spec(swarm="other", execution="e-3"))
    k8s.create(
        "pods",
        {
            "metadata": {"name": "stray", "labels": {runtime.LABEL_SWARM: "example"}},
            "spec": {"containers": [{"name": "worker", "image": "x"}]},
        },
        NS,
    )
    attempts = await pods.list_attempts("example")
    assert sorted(attempts, key=lambda a: a.execution_id) == [
        runtime.Attempt("example", "eng-1", "e-1", 1, None, alive=True),
        runtime.Attempt("example", "eng-2", "e-2", 3, None, alive=True),
    ]
    assert k8s.calls["list pods"] == 1


def case(name: str, make: Callable[[], dict[str, Any]], node: str | None, failure, alive: bool):
    return pytest.param(make, node, failure, alive, id=name)


PULLING = {"waiting": {"reason": "ImagePullBackOff"}}
CASES = [
    case("oom_killed", lambda: status("Failed", exited(137, "OOMKilled")), None,
         Reason.OOM_KILLED, False),
    case("sigkill_137_is_application_exit", lambda: status("Failed", exited(137)), None,
         Reason.APPLICATION_EXIT, False),
    case("evicted", lambda: status("Failed", exited(137), reason="Evicted"), None,
         Reason.EVICTED, False),
    case("eviction_api", lambda: status("Failed", exited(143), disruption="EvictionByEvictionAPI"),
         None, Reason.EVICTED, False),
    case("stale_disruption_target", lambda: status("Running", disruption="EvictionByEvictionAPI"),
         None, None, True),
    case("phase_unknown", lambda: status("Unknown"), None, Reason.NODE_LOST, True),
    case("taint_manager", lambda: status("Running", disruption="DeletionByTaintManager"), None,
         Reason.NODE_LOST, True),
    case("node_not_ready", lambda: status("Running"), "not_ready", Reason.NODE_LOST, True),
    case("node_gone", lambda: status("Running"), "gone", Reason.NODE_LOST, True),
    case("image_pull_in_grace", lambda: status("Pending", PULLING, age=timedelta(seconds=60)),
         None, None, True),
    case("image_pull_after_grace", lambda: status("Pending", PULLING, age=timedelta(minutes=3)),
         None, Reason.IMAGE_PULL, True),
    case("application_exit", lambda: status("Failed", exited(3)), None,
         Reason.APPLICATION_EXIT, False),
    case("succeeded", lambda: status("Succeeded", exited(0, "Completed"), sidecar=exited(0)),
         None, None, False),
]  # fmt: skip


@pytest.mark.parametrize(("patch", "node", "failure", "alive"), CASES)
async def test_each_failure_reason_from_a_status_patch(
    pods,
    k8s,
    patch: Callable[[], dict[str, Any]],
    node: str | None,
    failure: Reason | None,
    alive: bool,
) -> None:
    """ "A failure reason is one of oom_killed, evicted, node_lost, image_pull (after a two minute
    grace) or application_exit", classified from the status the kubelet patches in."""
    name = await started(pods, k8s, spec())
    await client.CoreV1Api(k8s.api_client).patch_namespaced_pod_status(
        name, NS, {"status": patch()}
    )
    if node == "not_ready":
        k8s.set_node_ready("node-a", False)
    elif node == "gone":
        k8s.remove_node("node-a")
    [attempt] = await pods.list_attempts("example")
    assert (attempt.failure, attempt.alive) == (failure, alive)


async def test_watch_wakes_on_a_status_change(pods, k8s) -> None:
    """The watch between passes wakes on the failure itself ("a failure acted on within a
    second": how fast is measured by bench/reconcile.py), with the failed attempt in hand."""
    name = await started(pods, k8s, spec())
    async with contextlib.aclosing(pods.watch("example")) as watch:
        await woken(watch)  # established
        k8s.set_pod_status(NS, name, status("Failed", exited(137, "OOMKilled")))
        change = await asyncio.wait_for(anext(watch), WAKE_S)
        assert [a.execution_id for a in change.failed] == ["e-42"]
    [attempt] = await pods.list_attempts("example")
    assert attempt.failure is Reason.OOM_KILLED


async def test_watch_hands_a_failed_worker_to_the_fast_path(pods, k8s) -> None:
    """A failure the worker's own status proves comes with the wake, classified, so the
    controller recovers that seat without listing the swarm; the first wake (the watch
    established) asks for a listing pass."""
    name = await started(pods, k8s, spec())
    async with contextlib.aclosing(pods.watch("example")) as watch:
        first = await asyncio.wait_for(anext(watch), WAKE_S)
        assert first.relist and first.failed == ()
        k8s.set_pod_status(NS, name, status("Failed", exited(137, "OOMKilled")))
        change = await asyncio.wait_for(anext(watch), WAKE_S)
    assert change.failed == (
        runtime.Attempt("example", "eng-2", "e-42", 1, Reason.OOM_KILLED, alive=False),
    )
    assert not change.relist


async def test_watch_leaves_a_failure_only_a_node_proves_to_a_listing_pass(pods, k8s) -> None:
    """node_lost from a node going NotReady needs the Node, which only a listing pass reads
    with the Pod: the wake asks for one and hands over no attempt."""
    await started(pods, k8s, spec())
    async with contextlib.aclosing(pods.watch("example")) as watch:
        await woken(watch)
        k8s.set_node_ready("node-a", None)
        change = await asyncio.wait_for(anext(watch), WAKE_S)
    assert change.relist and change.failed == ()


async def test_watch_does_not_wake_for_a_new_healthy_worker(pods, k8s) -> None:
    """The replacement the controller just created is no news: a new Pod that is healthy
    wakes nothing (its first failure will)."""
    await started(pods, k8s, spec())
    changes: list[runtime.Change] = []

    async def consume() -> None:
        async for change in pods.watch("example"):
            changes.append(change)

    consumer = asyncio.create_task(consume())
    try:
        await ports.eventually(_count(changes, 1), timeout=3)
        await started(pods, k8s, spec(seat="eng-3", execution="e-43"))
        await asyncio.sleep(0.5)
        assert len(changes) == 1, changes
        k8s.set_pod_status(NS, templates.pod_name("example", "e-43"), status("Failed", exited(2)))
        await ports.eventually(_count(changes, 2), timeout=3)
    finally:
        consumer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consumer
    assert [(a.execution_id, a.failure) for a in changes[1].failed] == [
        ("e-43", Reason.APPLICATION_EXIT)
    ]


def _count(changes: list[runtime.Change], n: int) -> Callable[[], Awaitable[None]]:
    async def check() -> None:
        assert len(changes) == n, changes

    return check


async def test_watch_wakes_when_a_workers_node_goes_not_ready(pods, k8s) -> None:
    """node_lost "from a Pod bound to a node that is ... not Ready" wakes the pass too, though
    the Pod's own status cannot change (its kubelet is gone)."""
    await started(pods, k8s, spec())
    async with contextlib.aclosing(pods.watch("example")) as watch:
        await woken(watch)
        k8s.set_node_ready("node-a", None)
        await woken(watch)
    [attempt] = await pods.list_attempts("example")
    assert attempt.failure is Reason.NODE_LOST


async def test_watch_wakes_when_the_image_pull_grace_runs_out(pods, k8s) -> None:
    """image_pull "after a two minute grace": the watch wakes when the grace ends, though nothing
    about the Pod changes then (and a change the pass cannot see, like Running to pulling, does
    not wake it)."""
    name = await started(pods, k8s, spec())
    pulling = status("Pending", PULLING, age=timedelta(seconds=118))
    async with contextlib.aclosing(pods.watch("example")) as watch:
        await woken(watch)
        k8s.set_pod_status(NS, name, pulling)
        deadline = datetime.fromisoformat(pulling["startTime"]) + classifying.IMAGE_PULL_GRACE
        [attempt] = await pods.list_attempts("example")
        assert attempt.failure is None
        await woken(watch, timeout=5.0)
        assert datetime.now(UTC) >= deadline
    [attempt] = await pods.list_attempts("example")
    assert attempt.failure is Reason.IMAGE_PULL


async def test_launch_creates_a_secret_and_a_pod_with_the_restorer_sidecar(pods, k8s) -> None:
    """The replacement Pod has "the restorer sidecar injected and its worker credential in a
    Secret": a native sidecar (init container, restartPolicy Always), the credential only through
    a secretKeyRef, never inline in the Pod."""
    s = spec(generation=4)
    await pods.launch(s)
    [pod] = k8s.objects("pods", NS)
    [secret] = k8s.objects("secrets", NS)
    assert TOKEN not in json.dumps(pod)
    assert base64.b64decode(secret["data"][templates.CREDENTIAL_KEY]).decode() == TOKEN
    assert secret["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    [sidecar] = pod["spec"]["initContainers"]
    [worker] = pod["spec"]["containers"]
    assert (sidecar["name"], sidecar["restartPolicy"]) == ("restorer", "Always")
    assert worker["name"] == "worker"
    assert worker["image"] == s.image and tuple(worker["command"]) == s.command
    reference = {"secretKeyRef": {"name": secret["metadata"]["name"], "key": "credential"}}
    for c in (sidecar, worker):
        [credential] = [e for e in c["env"] if e["name"] == runtime.CREDENTIAL_ENV]
        assert credential == {"name": runtime.CREDENTIAL_ENV, "valueFrom": reference}
        assert {"name": "AGENTIHOOKS_CONTROL_ADDR", "value": "controller:50051"} in c["env"]
    assert pod["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "agentihooks",
        "agentihooks.io/swarm": "example",
        "agentihooks.io/seat": "eng-2",
        "agentihooks.io/execution": "e-42",
        "agentihooks.io/generation": "4",
    }
    assert pod["metadata"]["annotations"][runtime.ANNOTATION_IMAGE] == s.image
    assert pod["spec"]["restartPolicy"] == "Never"
    assert TOKEN not in repr(s)


async def test_launch_twice_makes_one_pod(pods, k8s) -> None:
    """A launch is idempotent by execution id: the second finds the Pod and creates nothing."""
    await pods.launch(spec())
    await pods.launch(spec())
    assert len(k8s.objects("pods", NS)) == 1
    assert len(k8s.objects("secrets", NS)) == 1
    assert k8s.calls["create pods"] == 2


async def test_launch_refuses_a_pod_name_held_by_another_attempt(pods, k8s) -> None:
    """Idempotence is by execution id: a Pod of the same name for anything else is refused."""
    k8s.create(
        "pods",
        {
            "metadata": {"name": templates.pod_name("example", "e-42"), "labels": {"x": "y"}},
            "spec": {"containers": [{"name": "worker", "image": "x"}]},
        },
        NS,
    )
    with pytest.raises(runtime.PodsRefused):
        await pods.launch(spec())
    assert k8s.objects("secrets", NS) == []


async def test_remove_deletes_the_pod_and_its_secret_and_is_idempotent(pods, k8s) -> None:
    """ "Remove what the fenced attempt held": its Pod and credential Secret; twice is fine."""
    await started(pods, k8s, spec())
    await started(pods, k8s, spec(execution="e-43", seat="eng-3"))
    await pods.remove("example", "e-42")
    await pods.remove("example", "e-42")
    assert [a.execution_id for a in await pods.list_attempts("example")] == ["e-43"]
    assert [s["metadata"]["name"] for s in k8s.objects("secrets", NS)] == [
        templates.secret_name("example", "e-43")
    ]


async def test_a_pod_the_cluster_deleted_keeps_its_reason(pods, k8s) -> None:
    """An evicted Pod is deleted by the cluster; the watch keeps its final state, so the pass
    still reads evicted (not a vanished attempt) until it removes the attempt."""
    name = await started(pods, k8s, spec())
    core = client.CoreV1Api(k8s.api_client)
    async with contextlib.aclosing(pods.watch("example")) as watch:
        await woken(watch)
        k8s.set_pod_status(
            NS, name, status("Failed", exited(143), disruption="EvictionByEvictionAPI")
        )
        await core.delete_namespaced_pod(name, NS)
        evicted = [
            runtime.Attempt(
                "example", "eng-2", "e-42", 1, Reason.EVICTED, alive=False, departed=True
            )
        ]
        for _ in range(5):  # the status change and the deletion may wake it once or twice
            if await pods.list_attempts("example") == evicted:
                break
            await woken(watch)
    assert k8s.get("pods", name, NS) is None
    await pods.remove("example", "e-42")
    assert await pods.list_attempts("example") == []


@pytest.mark.parametrize("gone_as_status", [False, True], ids=["error-event", "http-410"])
async def test_watch_lists_again_after_410_gone(gone_as_status: bool) -> None:
    """A watch from a compacted resourceVersion gets 410 Gone; the runtime lists again (and wakes
    the pass: changes may have been missed), then keeps watching."""
    async with k8s_emulator.serving(gone_as_status=gone_as_status) as k8s:
        k8s.add_node("node-a")
        rt = kubernetes.KubernetesRuntime(k8s.api_client, NS, templates.default_pod_template())
        try:
            name = await started(rt, k8s, spec())
            async with contextlib.aclosing(rt.watch("example")) as watch:
                await woken(watch)
                lists = k8s.calls["list pods"]
                await started(rt, k8s, spec(swarm="elsewhere"))
                # Moves the version past what the Pod watch has seen (it shows no Secret).
                k8s.create("secrets", {"metadata": {"name": "unrelated"}, "data": {}}, NS)
                k8s.compact()
                k8s.drop_watches()
                await woken(watch, timeout=3.0)
                assert k8s.calls["list pods"] == lists + 1
                k8s.set_pod_status(NS, name, status("Failed", exited(1)))
                await woken(watch)
            [attempt] = await rt.list_attempts("example")
            assert attempt.failure is Reason.APPLICATION_EXIT
        finally:
            await rt.aclose()


async def test_watch_resumes_after_a_dropped_connection(pods, k8s) -> None:
    """A watch cut mid-stream resumes from its resourceVersion without listing again."""
    name = await started(pods, k8s, spec())
    async with contextlib.aclosing(pods.watch("example")) as watch:
        await woken(watch)
        lists = k8s.calls["list pods"]
        k8s.drop_watches(abrupt=True)
        k8s.fail_next("watch pods", 503)
        k8s.set_pod_status(NS, name, status("Failed", exited(2)))
        await woken(watch, timeout=3.0)
        assert k8s.calls["list pods"] == lists


async def test_cluster_errors_map_onto_the_runtime_errors(pods, k8s) -> None:
    """Callers see PodsUnavailable (temporary) or PodsRefused (permanent), never client types."""
    k8s.fail_next("list pods", 503, retry_after=2)
    with pytest.raises(runtime.PodsUnavailable) as unavailable:
        await pods.list_attempts("example")
    assert (unavailable.value.code, unavailable.value.retry_after) == (503, 2.0)
    # The failed pods list cancelled its concurrent nodes list; let a request of it that was
    # already on the wire land (and be answered) before the next fault is armed, or it would
    # take that fault.
    await asyncio.sleep(0.2)
    await pods.list_attempts("example")
    k8s.fail_next("list nodes", 403)
    with pytest.raises(runtime.PodsRefused) as refused:
        await pods.list_attempts("example")
    assert refused.value.code == 403
    k8s.fail_next("create secrets", 422)
    with pytest.raises(runtime.PodsRefused) as invalid:
        await pods.launch(spec())
    assert TOKEN not in str(invalid.value)
    with pytest.raises(runtime.PodsRefused):
        await pods.launch(spec(seat="not a label value!"))
    k8s.fail_next("list pods", 403)
    with pytest.raises(runtime.PodsRefused):
        async with contextlib.aclosing(pods.watch("example")) as watch:
            await woken(watch)
            await woken(watch)


async def test_an_unreachable_api_is_temporary() -> None:
    """No API server at all is PodsUnavailable: the pass retries later."""
    async with k8s_emulator.serving() as k8s:
        url = k8s.url
    api = client.ApiClient(client.Configuration(host=url))
    try:
        rt = kubernetes.KubernetesRuntime(api, NS, templates.default_pod_template())
        with pytest.raises(runtime.PodsUnavailable):
            await rt.list_attempts("example")
    finally:
        await api.close()


async def test_a_removed_pod_kept_terminating_by_a_finalizer_is_not_listed(pods, k8s) -> None:
    """Removed attempts are not listed, even when a finalizer keeps the Pod Terminating (a
    zombie's Pod); its Secret is gone at once."""
    name = await started(pods, k8s, spec())
    await client.CoreV1Api(k8s.api_client).patch_namespaced_pod(
        name, NS, {"metadata": {"finalizers": ["example.com/hold"]}}
    )
    await pods.remove("example", "e-42")
    assert k8s.get("pods", name, NS)["metadata"]["deletionTimestamp"]
    assert k8s.objects("secrets", NS) == []
    assert await pods.list_attempts("example") == []


async def test_the_emulator_selects_and_refuses_like_the_api_server(k8s) -> None:
    """The emulator the tests above rely on: label selectors (=, !=, in, notin, exists, !key),
    resourceVersion on lists, 409 AlreadyExists and 404 NotFound as Status objects."""
    core = client.CoreV1Api(k8s.api_client)
    for name, labels in [("a", {"tier": "x", "k": "1"}), ("b", {"tier": "y"}), ("c", {})]:
        body = {
            "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "worker", "image": "i"}]},
        }
        await core.create_namespaced_pod(NS, body)

    async def names(selector: str) -> list[str]:
        listed = await core.list_namespaced_pod(NS, label_selector=selector)
        assert int(listed.metadata.resource_version) == k8s.resource_version
        return [p.metadata.name for p in listed.items]

    assert await names("tier=x") == ["a"]
    assert await names("tier!=x") == ["b", "c"]
    assert await names("tier in (x, y)") == ["a", "b"]
    assert await names("tier notin (x)") == ["b", "c"]
    assert await names("tier") == ["a", "b"]
    assert await names("!tier") == ["c"]
    assert await names("tier,k=1") == ["a"]
    with pytest.raises(client.ApiException) as exists:
        await core.create_namespaced_pod(NS, {"metadata": {"name": "a"}, "spec": body["spec"]})
    assert exists.value.status == 409
    assert json.loads(exists.value.body)["reason"] == "AlreadyExists"
    with pytest.raises(client.ApiException) as missing:
        await core.read_namespaced_pod("nope", NS)
    assert (missing.value.status, json.loads(missing.value.body)["reason"]) == (404, "NotFound")


async def test_the_controllers_client_launches_and_removes_without_a_thread_hop(k8s) -> None:
    """The controller's client (`kubernetes.ApiClient`) makes the same calls through the real
    kubernetes-asyncio client with its session no longer looking up a proxy and a .netrc login
    on a worker thread per request, and sends the runtime's bodies as they are: the Pod stored
    is the Pod rendered."""
    api = kubernetes.ApiClient(client.Configuration(host=k8s.url))
    rt = kubernetes.KubernetesRuntime(api, NS, templates.default_pod_template())
    loop = asyncio.get_running_loop()
    hops: list[Any] = []
    plain = loop.run_in_executor

    def counting(executor: Any, func: Any, *args: Any) -> Any:
        hops.append(func)
        return plain(executor, func, *args)

    loop.run_in_executor = counting  # type: ignore[method-assign]
    try:
        await rt.launch(spec())
        [stored] = k8s.objects("pods", NS)
        await rt.remove("example", "e-42")
    finally:
        loop.run_in_executor = plain  # type: ignore[method-assign]
        await rt.aclose()
        await api.close()
    assert hops == []
    assert api.rest_client.pool_manager.trust_env is False
    rendered = templates.render_pod(
        templates.default_pod_template(), spec(), namespace=NS, defaults={}
    )
    assert stored["spec"]["containers"] == rendered["spec"]["containers"]
    assert stored["spec"]["initContainers"] == rendered["spec"]["initContainers"]
    assert k8s.objects("pods", NS) == [] and k8s.objects("secrets", NS) == []


async def test_the_controllers_client_takes_the_environments_proxy_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As the library's session would per request: HTTPS_PROXY (with its login) for the API
    server, unless NO_PROXY names it or the kubeconfig names a proxy of its own."""
    monkeypatch.setenv("HTTPS_PROXY", "http://ops:pw@proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "kubernetes.default.svc")
    api = kubernetes.ApiClient(client.Configuration(host="https://api.cluster.example:6443"))
    assert api.rest_client.proxy == "http://proxy.internal:3128"
    assert api.rest_client.proxy_headers == {
        "Proxy-Authorization": "Basic " + base64.b64encode(b"ops:pw").decode()
    }
    bypassed = kubernetes.ApiClient(client.Configuration(host="https://kubernetes.default.svc"))
    assert bypassed.rest_client.proxy is None
    configured = client.Configuration(host="https://api.cluster.example:6443")
    configured.proxy = "http://kubeconfig-proxy:8080"
    own = kubernetes.ApiClient(configured)
    assert own.rest_client.proxy == "http://kubeconfig-proxy:8080"
    for each in (api, bypassed, own):
        await each.close()
