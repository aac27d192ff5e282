"""The `events.k8s.io/v1` Event a notice becomes, and its name (pure).

An Event's name is fixed by what it is about: the attempt's Pod (by name), the reason, the action
and the related Pod. Every replica, and a restarted controller, names the same happening the same
way, so a second post of it is answered AlreadyExists and adds nothing (client-go names Events
by a timestamp instead: two replicas would post two). The Pod's uid is left out, as a controller
cannot always know it (a restarted one, for a Pod deleted before it started), except for a notice
about one Pod object (`Notice.pod_object`: a launch), which is only posted by the controller that
created that Pod.
"""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import UTC, datetime
from typing import Any, TypedDict

from services.controller.pods import notices, runtime

API_VERSION = "events.k8s.io/v1"


class ObjectReference(TypedDict, total=False):
    """A Pod as an Event names it (`regarding`, `related`)."""

    apiVersion: str
    kind: str
    name: str
    namespace: str
    uid: str


class Series(TypedDict):
    """How often an Event happened, and when last."""

    count: int
    lastObservedTime: str


class EventBody(TypedDict, total=False):
    """An `events.k8s.io/v1` Event as posted."""

    apiVersion: str
    kind: str
    metadata: dict[str, Any]
    eventTime: str
    reportingController: str
    reportingInstance: str
    action: str
    reason: str
    regarding: ObjectReference
    related: ObjectReference
    note: str
    type: str
    series: Series


@dataclasses.dataclass(frozen=True)
class PodRef:
    """A worker Pod: its name, and its uid when known (`kubectl describe pod` finds an Event
    by the uid it names)."""

    name: str
    uid: str | None = None

    def reference(self, namespace: str) -> ObjectReference:
        ref = ObjectReference(apiVersion="v1", kind="Pod", name=self.name, namespace=namespace)
        if self.uid:
            ref["uid"] = self.uid
        return ref


def name(regarding: PodRef, notice: notices.Notice, related: PodRef | None) -> str:
    """The Event's name: ``POD.HASH`` of what it is about (see the module docstring)."""
    key = "\0".join(
        (
            regarding.name,
            (regarding.uid or "") if notice.pod_object else "",
            notice.reason.value,
            notice.action,
            related.name if related else "",
        )
    )
    return f"{regarding.name}.{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def micro_time(at: str = "", *, now: datetime | None = None) -> str:
    """An RFC 3339 time with exactly six fractional digits, as the API server reads a
    MicroTime; `at` when it parses, else `now` (the current time by default)."""
    when: datetime | None = None
    if at:
        try:
            when = datetime.fromisoformat(at)
        except ValueError:
            when = None
    if when is None:
        when = now or datetime.now(UTC)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event(
    notice: notices.Notice,
    *,
    namespace: str,
    instance: str,
    regarding: PodRef,
    related: PodRef | None = None,
) -> EventBody:
    """The Event to create for a notice's first occurrence.

    Args:
        notice: What happened.
        namespace: The workers' namespace (where the Pods and their Events live).
        instance: This controller process's holder id (the `reportingInstance`).
        regarding: The Pod the Event is about.
        related: Another Pod it names (a fenced attempt's replacement).

    Returns:
        The body; its series is set by the recorder once the notice repeats.
    """
    labels = {
        runtime.LABEL_MANAGED_BY: runtime.MANAGED_BY,
        runtime.LABEL_SWARM: notice.swarm,
        runtime.LABEL_SEAT: notice.seat,
        runtime.LABEL_EXECUTION: notice.execution_id,
    }
    body = EventBody(
        apiVersion=API_VERSION,
        kind="Event",
        metadata={
            "name": name(regarding, notice, related),
            "namespace": namespace,
            "labels": {k: v for k, v in labels.items() if _label_value(v)},
        },
        eventTime=micro_time(notice.at),
        reportingController=notices.REPORTING_CONTROLLER,
        reportingInstance=instance[:128],
        action=notice.action,
        reason=notice.reason.value,
        regarding=regarding.reference(namespace),
        note=notice.note,
        type=notice.type,
    )
    if related is not None:
        body["related"] = related.reference(namespace)
    return body


def _label_value(value: str) -> bool:
    """Whether `value` is a valid label value (an Event with an invalid one would be refused)."""
    if len(value) > 63:
        return False
    if not value:
        return True
    edges = value[0].isalnum() and value[-1].isalnum()
    return edges and all(c.isalnum() or c in "-_." for c in value) and value.isascii()
