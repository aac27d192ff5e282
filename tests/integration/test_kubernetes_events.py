"""Kubernetes Events of recovery, posted by the real controller through kubernetes-asyncio to
the API emulator, which keeps them as the API server does (issue 24, part 2).

The controller's relay follows the swarm's event stream and its runtime posts each step on the
worker Pod it concerns with the `events.k8s.io/v1` API; the recorder aggregates a repeat into
the Event's series and rate-limits each Pod's Events, and it never blocks or fails recovery.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agentihooks.swarm.v2 import recovery_pb2 as pb
from agentihooks.swarm.v2 import types_pb2

from services.controller.pods import correlation, event_bodies, notices, recording, templates
from tests.support import controller_server as cs
from tests.support import ports
from tests.support.kube.apiserver import events as k8s_events
from tests.support.kube.apiserver.emulator import K8sEmulator

SWARM, SEAT = "example", "eng-1"
FIRST, SECOND = f"{SWARM}.{SEAT}.1", f"{SWARM}.{SEAT}.2"
CREATE, PATCH = "create events.events.k8s.io", "patch events.events.k8s.io"
TEXT = "build the thing"


def pod_events(emulator: K8sEmulator, execution: str) -> dict[str, dict[str, Any]]:
    """The Events about an attempt's Pod as events.k8s.io/v1 serves them, by reason."""
    name = templates.pod_name(SWARM, execution)
    found: dict[str, dict[str, Any]] = {}
    for core in emulator.objects("events", cs.NAMESPACE):
        if core["involvedObject"].get("name") == name:
            event = k8s_events.to_v1(core)
            assert event["reason"] not in found, f"two {event['reason']} Events on {name}"
            found[event["reason"]] = event
    return found


async def events_of(
    emulator: K8sEmulator, execution: str, *reasons: str
) -> dict[str, dict[str, Any]]:
    """Wait until the attempt's Pod has an Event for each of `reasons`."""

    async def posted() -> dict[str, dict[str, Any]]:
        found = pod_events(emulator, execution)
        assert set(reasons) <= set(found), (execution, sorted(found))
        return found

    return await ports.eventually(posted, timeout=20)


async def decide_fresh(ctl: cs.Controller) -> None:
    answer = await ctl.stub.RestoreDecision(
        pb.RestoreDecisionRequest(swarm=SWARM, seat=SEAT, choice=types_pb2.CHOICE_FRESH),
        metadata=cs.OPERATOR,
    )
    assert answer.decision.replacement_execution_id == SECOND


async def report(ctl: cs.Controller, *reports: pb.RestoreReport) -> None:
    await ctl.stub.ReportRestore(
        iter(reports),  # type: ignore[arg-type]
        metadata=cs.md(cs.worker_credential(ctl, SECOND)),
    )


async def test_each_step_of_a_recovery_is_an_event_on_the_pod_it_concerns(
    controller: cs.Controller,
) -> None:
    """Issue 24: a fence, a decision awaited, the decision accepted, the replacement launched,
    its refused restore (with the reason code) and its verified outcome (with the continuity)
    are Events on the fenced Pod and on the replacement's, posted with `events.k8s.io/v1` as
    `agentihooks.io/controller` by this controller's holder id; each names its Pod's uid (how
    `kubectl describe pod` finds it) and its note holds no secret, task text or anything a
    worker wrote beyond its reason code."""
    ctl, emulator = controller, controller.emulator
    await ctl.apply(cs.document(seats=(SEAT,), automation=False))
    await cs.wait_for_pod(ctl, FIRST)
    first_uid = ctl.pod_of(FIRST)["metadata"]["uid"]  # type: ignore[index]
    ctl.fail(FIRST, cs.terminated("Error", 1))
    on_first = await events_of(emulator, FIRST, "Fenced", "AwaitingDecision")
    fenced, waiting = on_first["Fenced"], on_first["AwaitingDecision"]
    assert (fenced["type"], fenced["action"]) == ("Warning", "Fence")
    assert fenced["note"] == f"Fenced {FIRST} (generation 1): application_exit; lost tail unknown"
    assert (waiting["type"], waiting["action"]) == ("Warning", "Decide")
    assert waiting["note"].endswith("awaits a decision: application_exit; offer: fresh only")
    for event in on_first.values():
        assert event["regarding"] == {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": templates.pod_name(SWARM, FIRST),
            "namespace": cs.NAMESPACE,
            "uid": first_uid,
        }
        assert event["reportingController"] == "agentihooks.io/controller"
        assert event["reportingInstance"] == ctl.hub.holder
        assert event["metadata"]["labels"]["agentihooks.io/seat"] == SEAT
        assert "series" not in event

    await decide_fresh(ctl)
    accepted = (await events_of(emulator, FIRST, "DecisionAccepted"))["DecisionAccepted"]
    assert (accepted["type"], accepted["action"]) == ("Normal", "Decide")
    assert accepted["note"] == (
        f"fresh accepted for {FIRST} (generation 1) (operator): fresh;"
        f" replacement {SECOND} (generation 2)"
    )
    assert accepted["related"]["name"] == templates.pod_name(SWARM, SECOND)
    on_second = await events_of(emulator, SECOND, "DecisionAccepted", "ReplacementLaunched")
    launched = on_second["ReplacementLaunched"]
    second_uid = ctl.pod_of(SECOND)["metadata"]["uid"]  # type: ignore[index]
    assert launched["regarding"]["uid"] == second_uid
    # The decision on the replacement's Pod too (the fenced one is gone): why it exists. It
    # was posted once that Pod existed, so it names its uid.
    why = on_second["DecisionAccepted"]
    assert (why["note"], why["regarding"]["uid"]) == (accepted["note"], second_uid)
    assert why["related"]["name"] == templates.pod_name(SWARM, FIRST)
    assert (launched["type"], launched["action"]) == ("Normal", "Launch")
    assert launched["note"] == f"Launched replacement {SECOND} (generation 2) on seat {SEAT}"

    secret_tail = "/home/agent/" + cs.GRANT_KEY
    await report(ctl, pb.RestoreReport(refusal=pb.RestoreRefusal(reason=f"source: {secret_tail}")))
    await report(
        ctl,
        pb.RestoreReport(
            outcome=types_pb2.RestoreOutcome(
                execution_id=SECOND, recovery=types_pb2.CONTINUITY_FRESH
            )
        ),
    )
    on_second = await events_of(emulator, SECOND, "RestoreRefused", "OutcomeVerified")
    refused, verified = on_second["RestoreRefused"], on_second["OutcomeVerified"]
    assert (refused["type"], refused["action"]) == ("Warning", "Restore")
    assert refused["note"] == f"{SECOND} (generation 2) refused its restore: source"
    assert (verified["type"], verified["action"]) == ("Normal", "Restore")
    assert verified["note"] == f"{SECOND} (generation 2) restored fresh"
    assert {e["regarding"]["uid"] for e in on_second.values()} == {second_uid}

    shown = json.dumps(emulator.objects("events", cs.NAMESPACE))
    credentials = [cs.GRANT_KEY, cs.OPERATOR_TOKEN, cs.worker_credential(ctl, SECOND)]
    for secret in [*credentials, TEXT, secret_tail, cs.MASTER_SECRET]:
        assert secret not in shown


async def test_a_restarted_controller_posts_no_event_twice(
    controllers: cs.Controllers,
) -> None:
    """Issue 24: Event names are fixed by what they are about, so a controller started after
    another (a restart, or a replica taking the lease over), which reads back the stream's
    recent events, finds each Event there already (AlreadyExists) and posts no second one."""
    ctl = await controllers.start()
    await ctl.apply(cs.document(seats=(SEAT,), automation=False))
    await cs.wait_for_pod(ctl, FIRST)
    ctl.fail(FIRST, cs.terminated("Error", 1))
    before = await events_of(ctl.emulator, FIRST, "Fenced", "AwaitingDecision")
    creates = ctl.emulator.calls[CREATE]
    restarted = await controllers.restart(ctl)
    assert restarted.hub.holder != ctl.hub.holder

    async def read_back() -> None:
        assert ctl.emulator.calls[CREATE] >= creates + 2  # both posted again: AlreadyExists

    await ports.eventually(read_back, timeout=20)
    assert pod_events(ctl.emulator, FIRST) == before
    await decide_fresh(restarted)
    accepted = (await events_of(ctl.emulator, FIRST, "DecisionAccepted"))["DecisionAccepted"]
    assert accepted["reportingInstance"] == restarted.hub.holder
    on_second = await events_of(ctl.emulator, SECOND, "DecisionAccepted", "ReplacementLaunched")
    assert {e["reportingInstance"] for e in on_second.values()} == {restarted.hub.holder}
    # Fenced, AwaitingDecision, DecisionAccepted on both Pods, ReplacementLaunched: no other.
    assert len(ctl.emulator.objects("events", cs.NAMESPACE)) == 5


def notice(execution: str, reason: notices.Reason = notices.Reason.FENCED) -> notices.Notice:
    return notices.Notice(SWARM, SEAT, execution, reason, f"{reason.value} {execution}")


@pytest.fixture
async def pod_refs(k8s_emulator: K8sEmulator) -> dict[str, event_bodies.PodRef]:
    """Five worker Pods on the emulator, by execution id."""
    refs = {}
    for n in range(1, 6):
        execution = f"{SWARM}.{SEAT}.{n}"
        name = templates.pod_name(SWARM, execution)
        pod = {"metadata": {"name": name}, "spec": {"containers": [{"name": "w", "image": "i"}]}}
        created = k8s_emulator.create("pods", pod, cs.NAMESPACE)
        refs[execution] = event_bodies.PodRef(name, created["metadata"]["uid"])
    return refs


def recorder_of(
    emulator: K8sEmulator, refs: dict[str, event_bodies.PodRef], **options: Any
) -> recording.EventRecorder:
    return recording.EventRecorder(
        emulator.api_client, cs.NAMESPACE, lambda _, execution: refs[execution], **options
    )


@pytest.fixture
async def recorder(
    k8s_emulator: K8sEmulator, pod_refs: dict[str, event_bodies.PodRef]
) -> AsyncIterator[recording.EventRecorder]:
    made = recorder_of(k8s_emulator, pod_refs, flush_s=0.05)
    made.start("controller-a")
    try:
        yield made
    finally:
        await made.aclose()


async def settled(recorder: recording.EventRecorder, posts: int) -> None:
    async def done() -> None:
        assert recorder.posted >= posts and recorder.correlator.waiting == 0
        assert recorder._queue.empty()

    await ports.eventually(done, timeout=20)


async def test_a_repeated_event_patches_its_series(
    recorder: recording.EventRecorder, k8s_emulator: K8sEmulator
) -> None:
    """Issue 24 (client-go's recorder): an Event that happens again on the same Pod, for the same
    reason, patches the existing Event's `series` (count and last time) instead of creating a
    second Event; its note and first time stay as they were."""
    recorder.record(notice(FIRST))
    await settled(recorder, 1)
    (first,) = pod_events(k8s_emulator, FIRST).values()
    for _ in range(2):
        recorder.record(notice(FIRST))
    await settled(recorder, 2)

    async def counted() -> dict[str, Any]:
        (event,) = pod_events(k8s_emulator, FIRST).values()
        assert event.get("series", {}).get("count") == 3, event
        return event

    event = await ports.eventually(counted, timeout=20)
    assert event["metadata"]["name"] == first["metadata"]["name"]
    assert (event["note"], event["eventTime"]) == (first["note"], first["eventTime"])
    assert k8s_emulator.calls[CREATE] == 1
    assert 1 <= k8s_emulator.calls[PATCH] <= 2


async def test_a_second_replica_posting_the_same_event_adds_none(
    recorder: recording.EventRecorder,
    k8s_emulator: K8sEmulator,
    pod_refs: dict[str, event_bodies.PodRef],
) -> None:
    """Issue 24: two replicas that post the same happening name it the same way: the second
    create is answered AlreadyExists and no second Event appears; a repeat the second replica
    then sees is counted in the same Event's series."""
    other = recorder_of(k8s_emulator, pod_refs, flush_s=0.05)
    other.start("controller-b")
    try:
        recorder.record(notice(FIRST))
        await settled(recorder, 1)
        other.record(notice(FIRST))

        async def refused() -> None:
            assert k8s_emulator.calls[CREATE] == 2 and other.correlator.waiting == 0

        await ports.eventually(refused, timeout=20)
        (event,) = pod_events(k8s_emulator, FIRST).values()
        assert event["reportingInstance"] == "controller-a" and "series" not in event
        other.record(notice(FIRST))
        await settled(other, 1)
        (event,) = pod_events(k8s_emulator, FIRST).values()
        assert event["series"]["count"] == 2
    finally:
        await other.aclose()


async def test_a_storm_about_one_pod_is_rate_limited_and_bounded(
    k8s_emulator: K8sEmulator, pod_refs: dict[str, event_bodies.PodRef]
) -> None:
    """Issue 24 (client-go's spam filter): each Pod's Events draw on a token bucket, so a storm
    about one Pod makes at most its burst of calls, merged into one series, while other Pods'
    Events still go out; and the queue is bounded: what does not fit is dropped at once,
    counted, never waited for."""
    storm = recorder_of(
        k8s_emulator,
        pod_refs,
        flush_s=0.05,
        queue_size=50,
        correlator=correlation.Correlator(burst=3, refill_s=3600.0),
    )
    storm.start("controller-a")
    try:
        for _ in range(40):
            storm.record(notice(FIRST))
        for execution in list(pod_refs)[1:]:
            storm.record(notice(execution))
        for _ in range(100):  # more than the queue holds: dropped without waiting
            storm.record(notice(FIRST, notices.Reason.RESTORE_REFUSED))
        assert storm.dropped >= 100 - 50 + 4

        async def quiet() -> None:
            assert storm._queue.empty() and storm.posted >= 3 + 4

        await ports.eventually(quiet, timeout=20)
        await asyncio.sleep(0.3)  # several flushes: nothing more may go out for FIRST
        first = templates.pod_name(SWARM, FIRST)
        calls = k8s_emulator.calls[CREATE] + k8s_emulator.calls[PATCH]
        assert calls == 3 + 4, k8s_emulator.calls
        assert storm.correlator.limited > 0 and storm.correlator.waiting >= 1
        events = k8s_emulator.objects("events", cs.NAMESPACE)
        on_first = [e for e in events if e["involvedObject"]["name"] == first]
        assert len(on_first) == 1 and on_first[0]["series"]["count"] == 3
        others = {e["involvedObject"]["name"] for e in events} - {first}
        assert others == {ref.name for ref in list(pod_refs.values())[1:]}
    finally:
        await storm.aclose()


@pytest.mark.parametrize("failure", ["error", "stall"])
async def test_a_failing_events_api_never_slows_or_breaks_recovery(
    failure: str,
    tmp_path: Any,
    redis_server: Any,
    k8s_emulator: K8sEmulator,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 24: posting Events is best effort. With every Events call answered 500, or held
    by the API server far longer than the recovery takes, the worker is fenced, the decision
    taken and the replacement launched all the same, while the first Event call is still
    unanswered; the controller's API stays available and ready; each kind of failure is logged
    once, and nothing is raised."""
    if failure == "error":
        k8s_emulator.fail_next(CREATE, 500, times=10_000)
    else:
        k8s_emulator.stall(CREATE, 600.0)
    caplog.set_level(logging.WARNING, logger="services.controller.pods.recording")
    root = await cs.empty_state(redis_server.url, tmp_path)
    ctl, server = await cs.start_controller(
        redis_server.url, k8s_emulator, root, events_timeout=600.0
    )
    try:
        await ctl.apply(cs.document(seats=(SEAT,), automation=False))
        await cs.wait_for_pod(ctl, FIRST)
        ctl.fail(FIRST, cs.terminated("Error", 1))

        async def pending() -> None:
            card = await cs.card(ctl, SEAT)
            assert card is not None and card.decision == "recovery_pending", card
            assert k8s_emulator.calls[CREATE] >= 1  # the Fenced Event's call was made

        await ports.eventually(pending, timeout=20)
        await decide_fresh(ctl)
        await cs.wait_for_pod(ctl, SECOND)
        assert k8s_emulator.objects("events", cs.NAMESPACE) == []
        assert ctl.hub.serving() and ctl.hub.ready()
        assert ctl.hub.runtime.api_available is True  # type: ignore[attr-defined]
        if failure == "error":

            async def tried() -> None:
                assert k8s_emulator.calls[CREATE] >= 4

            await ports.eventually(tried, timeout=20)
            lines = [r for r in caplog.records if r.getMessage() == "kubernetes_event_failed"]
            assert len(lines) == 1, [r.__dict__.get("fields") for r in lines]
            assert lines[0].__dict__["fields"]["code"] == 500
        else:
            assert k8s_emulator.calls[CREATE] == 1  # one call, still held: nothing waited on it
    finally:
        await cs.stop_controller(ctl, server)
