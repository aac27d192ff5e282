"""Events in the Kubernetes API emulator: one store, served as `events.k8s.io/v1` and core v1.

The API server keeps one kind of Event and serves it under both APIs, converting each way: an
Event created with `events.k8s.io/v1` (as controllers post them) is listed by ``kubectl get
events`` and shown in ``kubectl describe pod``'s Events section, both of which read core v1
(``/api/v1/namespaces/NS/events``, describe with a ``fieldSelector`` on ``involvedObject.uid``,
``.name`` and ``.namespace``). This module holds what the emulator needs for that, with no I/O:
the conversions (`to_core`, `to_v1`, as the API server's own), the checks the API server makes
on an `events.k8s.io/v1` create and update (`check_create`, `check_update`: required fields,
lengths, a series of at least 2, the deprecated fields unset, and nothing but the series and
labels changed by an update), and the rows of ``kubectl get events`` (`COLUMNS`, `cells`: the
columns of the API server's Table, as its printer fills them).
"""

from __future__ import annotations

import copy
import datetime
import re
from collections.abc import Mapping
from typing import Any

GROUP_VERSION = "events.k8s.io/v1"

# events.k8s.io/v1 field -> core v1 field, for the fields whose names differ.
_RENAMED = {
    "regarding": "involvedObject",
    "note": "message",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
}
_SAME = ("metadata", "eventTime", "series", "reportingInstance", "action", "reason", "type")
_SAME += ("related",)
_IMMUTABLE = (
    "regarding",
    "related",
    "reason",
    "note",
    "type",
    "action",
    "eventTime",
    "reportingController",
    "reportingInstance",
    "deprecatedSource",
    "deprecatedFirstTimestamp",
    "deprecatedLastTimestamp",
    "deprecatedCount",
)
_LIMITS = {"reason": 128, "action": 128, "reportingInstance": 128}
_NOTE_LIMIT = 1024
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$")

COLUMNS = [
    ("Last Seen", "string", 0),
    ("Type", "string", 0),
    ("Reason", "string", 0),
    ("Object", "string", 0),
    ("Subobject", "string", 1),
    ("Source", "string", 1),
    ("Message", "string", 0),
    ("First Seen", "string", 1),
    ("Count", "integer", 1),
    ("Name", "string", 1),
]
"""The columns of the API server's Table of core v1 Events (priority 1: ``-o wide`` only)."""


class Invalid(Exception):
    """What the API server answers 422 Invalid for (the message lists the fields)."""


def to_core(event: Mapping[str, Any]) -> dict[str, Any]:
    """An `events.k8s.io/v1` Event as core v1 serves it (unset times as null, as Go writes
    them)."""
    core: dict[str, Any] = {
        "kind": "Event",
        "apiVersion": "v1",
        "involvedObject": {},
        "source": {},
        "firstTimestamp": None,
        "lastTimestamp": None,
        "eventTime": None,
        "reportingComponent": "",
        "reportingInstance": "",
    }
    for field in _SAME:
        if field in event:
            core[field] = copy.deepcopy(event[field])
    for field, renamed in _RENAMED.items():
        if event.get(field) is not None:
            core[renamed] = copy.deepcopy(event[field])
    return core


def to_v1(core: Mapping[str, Any]) -> dict[str, Any]:
    """A stored (core v1) Event as `events.k8s.io/v1` serves it (unset fields left out)."""
    event: dict[str, Any] = {"kind": "Event", "apiVersion": GROUP_VERSION}
    for field in _SAME:
        if core.get(field) not in (None, "", {}):
            event[field] = copy.deepcopy(core[field])
    for field, renamed in _RENAMED.items():
        if core.get(renamed) not in (None, "", {}, 0):
            event[field] = copy.deepcopy(core[renamed])
    return event


def check_create(event: Mapping[str, Any], namespace: str) -> None:
    """The API server's checks of an `events.k8s.io/v1` create.

    Raises:
        Invalid: what it refuses, every field named.
    """
    problems = _checked(event, namespace)
    for field in ("deprecatedSource", "deprecatedFirstTimestamp", "deprecatedLastTimestamp"):
        if event.get(field) not in (None, {}, ""):
            problems.append(f"{field}: Invalid value: needs to be unset")
    if event.get("deprecatedCount"):
        problems.append("deprecatedCount: Invalid value: needs to be unset")
    problems += _series_problems(event)
    _raise(event, problems)


def check_update(old: Mapping[str, Any], new: Mapping[str, Any], namespace: str) -> None:
    """The API server's checks of an `events.k8s.io/v1` update (or patch): only the series
    and the metadata may change.

    Raises:
        Invalid: what it refuses.
    """
    problems = _checked(new, namespace)
    for field in _IMMUTABLE:
        if old.get(field) != new.get(field):
            problems.append(f"{field}: Invalid value: field is immutable")
    if old.get("series") != new.get("series"):
        problems += _series_problems(new)
    _raise(new, problems)


def cells(core: Mapping[str, Any]) -> list[Any]:
    """An Event's row of ``kubectl get events``, as the API server's printer fills it."""
    first = since(core.get("firstTimestamp")) if core.get("firstTimestamp") else None
    first = first or since(core.get("eventTime"))
    last = since(core.get("lastTimestamp")) if core.get("lastTimestamp") else first
    count = int(core.get("count") or 0)
    series = core.get("series")
    if series:
        last, count = since(series.get("lastObservedTime")), int(series.get("count") or 0)
    elif count == 0:
        count = 1  # a singleton Event of the new API has no count
    involved = core.get("involvedObject") or {}
    kind = str(involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = (core.get("source") or {}).get("component") or core.get("reportingComponent", "")
    instance = (core.get("source") or {}).get("host") or core.get("reportingInstance", "")
    return [
        last,
        core.get("type", ""),
        core.get("reason", ""),
        target,
        involved.get("fieldPath", ""),
        f"{source}, {instance}" if source and instance else source,
        str(core.get("message") or "").strip(),
        first,
        count,
        core["metadata"]["name"],
    ]


def since(stamp: Any) -> str:
    """How long ago an RFC 3339 time was, as kubectl writes it (45s, 12m, 5h, 3d)."""
    if not stamp:
        return "<unknown>"
    try:
        then = datetime.datetime.fromisoformat(str(stamp))
    except ValueError:
        return "<unknown>"
    if then.tzinfo is None:
        then = then.replace(tzinfo=datetime.UTC)
    seconds = max(0, int((datetime.datetime.now(datetime.UTC) - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * 2:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _checked(event: Mapping[str, Any], namespace: str) -> list[str]:
    problems = []
    if not event.get("eventTime"):
        problems.append("eventTime: Required value")
    if event.get("type") not in ("Normal", "Warning"):
        problems.append(f"type: Invalid value: has invalid value: {event.get('type')}")
    for field in ("reportingController", "reportingInstance", "action", "reason"):
        value = str(event.get(field) or "")
        if not value:
            problems.append(f"{field}: Required value")
        elif len(value) > _LIMITS.get(field, 10**6):
            problems.append(f"{field}: Invalid value: can have at most {_LIMITS[field]} characters")
    controller = str(event.get("reportingController") or "")
    prefix, _, last = controller.rpartition("/")
    if controller and (not _QUALIFIED.match(last) or (prefix and not _DNS_SUBDOMAIN.match(prefix))):
        problems.append("reportingController: Invalid value: not a qualified name")
    if len(str(event.get("note") or "").encode()) > _NOTE_LIMIT:
        problems.append(f"note: Invalid value: can have at most {_NOTE_LIMIT} characters")
    regarding = event.get("regarding") or {}
    if regarding.get("namespace", "") != namespace and namespace not in ("default", "kube-system"):
        problems.append("regarding.namespace: Invalid value: does not match event.namespace")
    return problems


def _series_problems(event: Mapping[str, Any]) -> list[str]:
    series = event.get("series")
    if series is None:
        return []
    problems = []
    if int(series.get("count") or 0) < 2:
        problems.append("series.count: Invalid value: should be at least 2")
    if not series.get("lastObservedTime"):
        problems.append("series.lastObservedTime: Required value")
    return problems


def _raise(event: Mapping[str, Any], problems: list[str]) -> None:
    if problems:
        name = (event.get("metadata") or {}).get("name", "")
        raise Invalid(f'Event.events.k8s.io "{name}" is invalid: {"; ".join(problems)}')
