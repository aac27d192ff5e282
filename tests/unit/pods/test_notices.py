"""What each recovery event tells a worker Pod (issue 24, part 2: Kubernetes Events), table-driven
over the stream events the controller's scripts write."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest

from services.controller.pods import event_bodies, notices

R = notices.Reason


@dataclasses.dataclass(frozen=True)
class StreamEvent:
    kind: str
    detail: Mapping[str, Any]
    execution_id: str = "example.eng-2.1"
    expected_generation: int = 1
    observed_generation: int = 1
    swarm: str = "example"
    seat: str = "eng-2"
    at: str = "2026-12-02T10:00:00Z"


OFFER = {"checkpoint_id": "ckpt-7", "continuity": "native", "watermark": 412}
DIRECTIVE = {"checkpoint_id": "ckpt-7", "recovery": "native", "session_id": "S", "watermark": 412}
CASES = [
    (
        StreamEvent(
            "fence",
            {
                "reason": "oom_killed",
                "native_session_id": "0b0c7a1e-secret-session",
                "archive_watermark": 400,
                "lost_tail": {"length": "unknown", "after_watermark": 400},
            },
        ),
        R.FENCED,
        "Fenced example.eng-2.1 (generation 1): oom_killed; archive watermark 400;"
        " lost tail unknown",
        None,
    ),
    (
        StreamEvent(
            "recovery", {"decision": "recovery_pending", "reason": "oom_killed", "offer": OFFER}
        ),
        R.AWAITING_DECISION,
        "example.eng-2.1 (generation 1) awaits a decision: oom_killed; offer: native resume"
        " from ckpt-7 at record 412, or fresh",
        None,
    ),
    (
        StreamEvent(
            "recovery",
            {"decision": "recovery_pending", "action": "reoffer", "reason": "image_pull"},
        ),
        R.AWAITING_DECISION,
        "example.eng-2.1 (generation 1) awaits a decision: image_pull; offer: fresh only",
        None,
    ),
    (
        StreamEvent(
            "recovery",
            {
                "decision": "accepted",
                "choice": "resume",
                "source": "master",
                "agent": "master@example-1",
                "directive": DIRECTIVE,
                "replacement_execution_id": "example.eng-2.2",
            },
        ),
        R.DECISION_ACCEPTED,
        "resume accepted for example.eng-2.1 (generation 1) (master): native from ckpt-7 at"
        " record 412; replacement example.eng-2.2 (generation 2)",
        "example.eng-2.2",
    ),
    (
        StreamEvent(
            "outcome",
            {
                "outcome": "verified",
                "recovery": "native",
                "checkpoint_id": "ckpt-7",
                "watermark": 412,
                "archive_watermark": 400,
            },
            execution_id="example.eng-2.2",
            observed_generation=2,
        ),
        R.OUTCOME_VERIFIED,
        "example.eng-2.2 (generation 2) restored native from ckpt-7 at record 412;"
        " archive watermark 400",
        None,
    ),
    (
        StreamEvent(
            "outcome",
            {"outcome": "refused", "reason": "corrupt_object"},
            execution_id="example.eng-2.2",
            observed_generation=2,
        ),
        R.RESTORE_REFUSED,
        "example.eng-2.2 (generation 2) refused its restore: corrupt_object",
        None,
    ),
]


@pytest.mark.parametrize(("event", "reason", "note", "related"), CASES)
def test_each_recovery_event_tells_its_pod(
    event: StreamEvent, reason: notices.Reason, note: str, related: str | None
) -> None:
    """Issue 24: fence, awaiting decision, decision accepted, restore refused (with the reason
    code) and outcome verified (with the continuity), each with its reason and note, on the
    Pod of the attempt the event names; the session id a fence records is never told."""
    found, *more = notices.of_event(event)
    assert (found.reason, found.note, found.related_execution_id) == (reason, note, related)
    assert (found.swarm, found.seat, found.execution_id) == ("example", "eng-2", event.execution_id)
    assert found.at == event.at
    assert "secret" not in found.note
    if reason is R.DECISION_ACCEPTED:
        # Also on the replacement's Pod (the fenced one is removed): why it exists.
        (also,) = more
        assert (also.execution_id, also.related_execution_id) == (related, event.execution_id)
        assert (also.reason, also.note, also.pod_pending) == (reason, note, True)
    else:
        assert more == []


@pytest.mark.parametrize(
    ("reason", "kind", "action"),
    [
        (R.FENCED, "Warning", "Fence"),
        (R.AWAITING_DECISION, "Warning", "Decide"),
        (R.DECISION_ACCEPTED, "Normal", "Decide"),
        (R.REPLACEMENT_LAUNCHED, "Normal", "Launch"),
        (R.RESTORE_REFUSED, "Warning", "Restore"),
        (R.OUTCOME_VERIFIED, "Normal", "Restore"),
    ],
)
def test_reasons_are_camel_case_with_a_type_and_an_action(
    reason: notices.Reason, kind: str, action: str
) -> None:
    notice = notices.Notice("example", "eng-1", "e-1", reason, "n")
    assert reason.value[0].isupper() and "_" not in reason.value
    assert (notice.type, notice.action) == (kind, action)


@pytest.mark.parametrize(
    "event",
    [
        StreamEvent("request", {"request": "refused", "reason": "forbidden_scope"}),
        StreamEvent("recovery", {"action": "relaunch", "cleared_refusal": "corrupt_object"}),
        StreamEvent("outcome", {"outcome": "something else"}),
    ],
)
def test_events_that_concern_no_pod_of_their_own_tell_nothing(event: StreamEvent) -> None:
    """A request applied or refused concerns no Pod; a relaunch is told when its Pod is created
    again (`launched`)."""
    assert notices.of_event(event) == []


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        ("corrupt_object", "corrupt_object"),
        ("source: /home/agent/app: token=abc123 refused", "source"),
        (
            "no checkpoint store is configured for this worker",
            "no checkpoint store is configured for this worker",
        ),
        ("Bearer wk.eyJ0eXAiOiJKV1Qi", "unknown"),
        ("x" * 300, "unknown"),
    ],
)
def test_a_refusal_is_told_by_its_code_only(reason: str, code: str) -> None:
    """Issue 24: a note carries no secret: a worker's refusal report is cut to its reason code,
    and anything that is not a code reads `unknown`."""
    assert notices.refusal({"reason": reason}) == code


def test_only_a_replacement_launch_is_told() -> None:
    assert notices.launched("example", "eng-1", "example.eng-1.1", 1) is None
    found = notices.launched("example", "eng-1", "example.eng-1.2", 2)
    assert found is not None and found.reason is R.REPLACEMENT_LAUNCHED and found.pod_object
    assert found.note == "Launched replacement example.eng-1.2 (generation 2) on seat eng-1"


def test_event_names_are_fixed_by_what_they_are_about() -> None:
    """Issue 24: a second replica or a restarted controller names the same happening the same
    way (so its create is AlreadyExists), with or without the Pod's uid, which a restarted
    controller may not know; a launch is per Pod object."""
    fence = notices.Notice(
        "example", "eng-1", "example.eng-1.1", R.FENCED, "a", at="2026-12-02T10:00:00Z"
    )
    again = dataclasses.replace(fence, note="b", at="2026-12-02T10:00:01Z")
    known = event_bodies.PodRef("pod-a", "uid-1")
    unknown = event_bodies.PodRef("pod-a")
    assert event_bodies.name(known, fence, None) == event_bodies.name(unknown, again, None)
    waiting = dataclasses.replace(fence, reason=R.AWAITING_DECISION)
    assert event_bodies.name(known, fence, None) != event_bodies.name(known, waiting, None)
    launch = notices.launched("example", "eng-1", "example.eng-1.2", 2)
    assert launch is not None
    relaunched = event_bodies.PodRef("pod-a", "uid-2")
    assert event_bodies.name(known, launch, None) != event_bodies.name(relaunched, launch, None)
    body = event_bodies.event(fence, namespace="ns", instance="controller-1", regarding=known)
    assert body["metadata"]["name"].startswith("pod-a.")
    assert body["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "pod-a",
        "namespace": "ns",
        "uid": "uid-1",
    }
    assert body["eventTime"] == "2026-12-02T10:00:00.000000Z"  # when it happened
    assert body["reportingController"] == "agentihooks.io/controller"


@pytest.mark.parametrize(
    ("at", "shown"),
    [
        ("2026-12-02T10:00:00Z", "2026-12-02T10:00:00.000000Z"),
        ("2026-12-02T11:00:00.5+01:00", "2026-12-02T10:00:00.500000Z"),
    ],
)
def test_times_are_micro_times(at: str, shown: str) -> None:
    """The API server reads an Event's times with exactly six fractional digits."""
    assert event_bodies.micro_time(at) == shown
