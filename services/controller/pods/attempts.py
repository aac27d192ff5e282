"""The attempts worker Pods run: read from a Pod's labels and classified, and remembered once
their Pod is gone.

Pure (no API call): `kubernetes.KubernetesRuntime` lists or reads Pods and asks here which
attempts they are; `informing.Informer` keeps its memories with `remember`.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from collections.abc import Callable, Container, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

from services.controller.pods import classifying, runtime

logger = logging.getLogger(__name__)

MEMORY = 10_000
"""Departed, removed and deleted attempts remembered (bounded: a pass outlives them)."""

Key = tuple[str, str]
"""(swarm, execution id) of an attempt."""

CLASSIFY_SLICE = 100
"""Pods classified between two yields to the event loop."""


class Read(NamedTuple):
    """One version of a worker Pod, read once: the attempt its labels and annotations name
    (healthy: its failure is worked out when asked, `attempt_at`) and what its status says."""

    pod: classifying.Pod
    attempt: runtime.Attempt | None
    """None for a Pod without complete attempt labels."""
    evidence: classifying.Evidence


def read(pod: classifying.Pod) -> Read:
    """The Pod read (see `Read`)."""
    found = classifying.evidence(pod)
    labels = pod.get("metadata", {}).get("labels") or {}
    annotations = pod.get("metadata", {}).get("annotations") or {}
    try:
        attempt: runtime.Attempt | None = runtime.Attempt(
            swarm=labels[runtime.LABEL_SWARM],
            seat=labels[runtime.LABEL_SEAT],
            execution_id=labels[runtime.LABEL_EXECUTION],
            generation=int(labels[runtime.LABEL_GENERATION]),
            failure=None,
            alive=not found.terminal,
            witness=annotations.get(runtime.ANNOTATION_DECISION),
            identity=annotations.get(runtime.ANNOTATION_ATTEMPT),
        )
    except (KeyError, ValueError):
        # Not one of ours after all (someone copied the managed-by label): not an attempt.
        logger.warning("ignoring Pod %s: its attempt labels are incomplete", name_of(pod))
        attempt = None
    return Read(pod, attempt, found)


def attempt_at(
    found: Read, nodes: Mapping[str, classifying.Node] | None, now: datetime
) -> runtime.Attempt | None:
    """The attempt a read Pod runs, classified with these nodes at `now`."""
    if found.attempt is None:
        return None
    failure = classifying.verdict(found.evidence, nodes, now)
    return found.attempt if failure is None else dataclasses.replace(found.attempt, failure=failure)


def attempt_of(
    pod: classifying.Pod, nodes: Mapping[str, classifying.Node] | None, now: datetime
) -> runtime.Attempt | None:
    """The attempt a worker Pod runs, classified; None for a Pod without complete labels."""
    return attempt_at(read(pod), nodes, now)


def key_of(pod: classifying.Pod) -> Key | None:
    labels = pod.get("metadata", {}).get("labels") or {}
    swarm, execution = labels.get(runtime.LABEL_SWARM), labels.get(runtime.LABEL_EXECUTION)
    return (swarm, execution) if swarm and execution else None


def name_of(pod: classifying.Pod) -> str:
    return pod.get("metadata", {}).get("name", "?")


def remember(memory: collections.OrderedDict[Any, Any], key: Any, value: Any) -> None:
    """Keep `key` in a bounded memory, newest last (the oldest of `MEMORY` goes)."""
    memory[key] = value
    memory.move_to_end(key)
    while len(memory) > MEMORY:
        memory.popitem(last=False)


async def classified(
    swarm: str,
    pods: list[classifying.Pod],
    nodes: Mapping[str, classifying.Node] | None,
    removed: Container[Key],
    reader: Callable[[classifying.Pod], Read] = read,
) -> list[runtime.Attempt]:
    """The attempts the swarm's Pods run, classified, but for those the runtime removed.

    `reader` reads each Pod: a cache of Pods (`informing`) answers what it read already."""
    now = datetime.now(UTC)
    attempts = []
    for start in range(0, len(pods), CLASSIFY_SLICE):
        # Other tasks (a recovery from the watch, an API call) get the loop between
        # slices: a large list is not one long stall.
        await asyncio.sleep(0)
        for pod in pods[start : start + CLASSIFY_SLICE]:
            attempt = attempt_at(reader(pod), nodes, now)
            # A removed attempt whose Pod a finalizer keeps Terminating is removed all the
            # same.
            if attempt is not None and (swarm, attempt.execution_id) not in removed:
                attempts.append(attempt)
    return attempts


def departed(
    swarm: str, memory: Mapping[Key, classifying.Pod], listed: Iterable[runtime.Attempt]
) -> list[runtime.Attempt]:
    """The swarm's attempts whose Pods the cluster deleted and `listed` does not hold, from
    the final state `memory` kept of each."""
    executions = {a.execution_id for a in listed}
    now = datetime.now(UTC)
    attempts = []
    for (owner, execution), pod in list(memory.items()):
        attempt = (
            attempt_of(pod, None, now) if owner == swarm and execution not in executions else None
        )
        if attempt is not None:
            # Deleted with neither a Succeeded phase nor a recorded cause: it did not finish,
            # and "any other" failure is application_exit.
            succeeded = (pod.get("status") or {}).get("phase") == "Succeeded"
            failure = attempt.failure or (
                None if succeeded else classifying.FailureReason.APPLICATION_EXIT
            )
            # Departed: the Pod is gone and only its last state is remembered, so the pass
            # treats the attempt as missing (a held replacement is then relaunched).
            attempts.append(
                dataclasses.replace(attempt, failure=failure, alive=False, departed=True)
            )
    return attempts
