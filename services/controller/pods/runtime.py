"""The port between recovery logic and wherever workers run (Kubernetes Pods, local processes).

The recovery pass sees each worker attempt as an `Attempt`, launches replacements from a
`LaunchSpec` and removes what a fenced attempt held. Implementations raise only the errors below,
so the pass never handles a client library's exception types.

Launching again. `launch` creates the attempt's worker when it does not exist now and otherwise
starts nothing: a second launch of a running or finished worker is a no-op, but a worker deleted
from outside the runtime (its Pod deleted with ``kubectl delete pod`` or by the cluster, a local
attempt's folder deleted or renamed) is created again, from the same spec, by the next launch.
That is how the operator relaunches a replacement whose restore was refused: fix the cause,
delete the failed worker, and the pass launches the same execution again. `remove` is the
fence's release and is final: the pass never launches a fenced attempt again, and a runtime
asked to launch an attempt it removed need not start it (LocalRuntime does not).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Protocol, runtime_checkable

from services.controller.pods import classifying, notices

LABEL_SWARM = "agentihooks.io/swarm"
LABEL_SEAT = "agentihooks.io/seat"
LABEL_EXECUTION = "agentihooks.io/execution"
LABEL_GENERATION = "agentihooks.io/generation"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "agentihooks"
ANNOTATION_IMAGE = "agentihooks.io/image"
"""The worker image (compatibility key); image references do not fit label values."""
ANNOTATION_ATTEMPT = "agentihooks.io/attempt"
"""One JSON object on every worker: the lease epoch it was launched under and the ids of its
credential and grants (`pod_identities`). No secrets."""
ANNOTATION_DECISION = "agentihooks.io/decision"
"""One JSON object: the decision that admitted a replacement and the fence it answered
(`witnesses`). The cluster's witness of the decision when Redis loses it."""

CREDENTIAL_ENV = "AGENTIHOOKS_WORKER_CREDENTIAL"
"""The one environment variable that carries the attempt's worker credential."""


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One worker attempt as the recovery pass sees it.

    Attributes:
        swarm: The swarm the attempt belongs to.
        seat: The seat it runs on.
        execution_id: Its execution id (one per attempt).
        generation: Its execution generation.
        failure: Why it failed, or None while it is healthy or after it succeeded.
        alive: Whether its worker may still be running code (a Pod on a lost node counts as alive:
            nobody can prove it stopped). Fencing works on credentials, so a fenced attempt that is
            still alive can do no harm; `alive` only tells whether removing it is still useful.
        departed: Its worker no longer exists (a Pod deleted from under the runtime) and the
            runtime lists only the final state it remembers, so that its failure keeps its
            reason. The pass treats a departed attempt as missing from the list: a next
            `launch` creates it again.
        witness: The decision that admitted the attempt, as its worker carries it
            (`ANNOTATION_DECISION`), if it does: what the controller writes back when Redis
            lost it.
        identity: The epoch the attempt was launched under and its token ids, as its worker
            carries them (`ANNOTATION_ATTEMPT`), if it does.
    """

    swarm: str
    seat: str
    execution_id: str
    generation: int
    failure: classifying.FailureReason | None
    alive: bool
    departed: bool = False
    witness: str | None = dataclasses.field(default=None, repr=False)
    identity: str | None = dataclasses.field(default=None, repr=False)


@dataclasses.dataclass(frozen=True)
class LaunchSpec:
    """What the runtime needs to start one attempt.

    Attributes:
        swarm: The swarm.
        seat: The seat.
        execution_id: The new attempt's execution id; launches are idempotent by it.
        generation: The new attempt's execution generation.
        image: The worker image (the compatibility key); LocalRuntime only records it.
        command: The command the worker runs, exactly (the caller composes the entry point).
        worker_credential: The attempt's own credential. Secret: it reaches the worker only as
            ``AGENTIHOOKS_WORKER_CREDENTIAL`` (from a Secret on Kubernetes), never a log or a file.
        env: Further environment of the worker (and of the restorer sidecar); no secrets.
        annotations: Further annotations of the worker (on Kubernetes, of its Pod; a local
            runtime records them in the attempt's ``attempt.json``): the decision that
            admitted a replacement (`ANNOTATION_DECISION`). No secrets, no conversation.
    """

    swarm: str
    seat: str
    execution_id: str
    generation: int
    image: str
    command: tuple[str, ...]
    worker_credential: str = dataclasses.field(repr=False)
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Change:
    """One coalesced wake of a watch: what may have changed since the last one.

    Attributes:
        failed: Attempts the watch saw fail, classified from their own worker's status alone
            (evidence no Node can overrule): the controller may recover these seats at once,
            without listing the swarm. The newest report of each execution id is kept.
        relist: Something changed that only a listing pass sees (a worker gone from under the
            runtime, one that finished, a node's readiness, an image pull's grace running out,
            the watch (re)established): run a full pass.
    """

    failed: tuple[Attempt, ...] = ()
    relist: bool = False


class PodsError(Exception):
    """A runtime could not do what was asked. Messages never hold credentials.

    Attributes:
        code: The HTTP status the cluster answered with, when there was one.
    """

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class PodsUnavailable(PodsError):
    """Temporary: the cluster (or machine) could not be reached or was overloaded; retry later.

    Attributes:
        retry_after: Seconds the server asked to wait, when it said.
    """

    def __init__(
        self, message: str, *, code: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after


class PodsRefused(PodsError):
    """Permanent: the request was refused (forbidden, invalid, a name held by another attempt)."""


class PodRuntime(Protocol):
    """Where worker attempts run. Every method is safe to repeat."""

    async def list_attempts(self, swarm: str) -> list[Attempt]:
        """Every attempt of the swarm that the runtime still holds, classified.

        Removed attempts are not listed. An attempt whose worker vanished without `remove` (a Pod
        deleted by the cluster) may be missing, or listed as `departed`; the pass compares with
        its own records.
        """
        ...

    def watch(self, swarm: str) -> AsyncIterator[Change]:
        """Yield whenever something the pass reads about the swarm's workers may have changed.

        Wakes are coalesced: many changes while the consumer works give one `Change`. The first
        wake comes as soon as the watch is established and asks for a full pass. A runtime that
        cannot tell what changed asks for a full pass every time.
        """
        ...

    async def launch(self, spec: LaunchSpec) -> None:
        """Create the attempt's worker when it does not exist now; otherwise start nothing.

        A worker deleted from outside the runtime is created again (see the module
        docstring).
        """
        ...

    async def remove(self, swarm: str, execution_id: str) -> None:
        """Stop the attempt's worker and delete what it held; nothing there is fine."""
        ...

    async def aclose(self) -> None:
        """Stop background work. Workers keep running: a restarted controller re-finds them."""
        ...


AvailabilitySubscriber = Callable[[bool], Awaitable[None]] | Callable[[bool], None]
"""Told True when a runtime's backend answers again, False when it stops answering."""


@runtime_checkable
class Reachable(Protocol):
    """A runtime whose backend can be down (the Kubernetes API): it says whether it answers."""

    @property
    def api_available(self) -> bool | None:
        """True while the backend answers, False while it does not, None before any call."""
        ...

    def subscribe(self, subscriber: AvailabilitySubscriber) -> None:
        """Call `subscriber` on every change of `api_available` (not with the state now)."""
        ...


@runtime_checkable
class Surveying(Protocol):
    """A runtime that can name every swarm whose workers it runs (one list of them all): what
    a controller starting on a Redis that lost its data looks at, since Redis no longer names
    those swarms (`losses`)."""

    async def swarms(self) -> set[str]:
        """The swarms with at least one worker, running or not, that was not removed."""
        ...


@runtime_checkable
class Recording(Protocol):
    """A runtime that tells the cluster's own tools what happened to its workers (Kubernetes
    Events on the worker Pods, shown by ``kubectl describe pod``). Best effort: `record` never
    blocks and never raises, so no recovery step waits for it or fails with it."""

    def start_recording(self, instance: str) -> None:
        """Record from now on, as `instance` (this process's holder id)."""
        ...

    def record(self, notice: notices.Notice) -> None:
        """Record one notice on its attempt's worker."""
        ...

    async def stop_recording(self) -> None:
        """Stop recording (what is not recorded yet is dropped)."""
        ...


def attempt_labels(swarm: str, seat: str, execution_id: str, generation: int) -> dict[str, str]:
    """The labels that mark a worker and let a runtime list a swarm's attempts.

    Args:
        swarm: The swarm.
        seat: The seat.
        execution_id: The execution id.
        generation: The execution generation.

    Returns:
        Label key to value.
    """
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_SWARM: swarm,
        LABEL_SEAT: seat,
        LABEL_EXECUTION: execution_id,
        LABEL_GENERATION: str(generation),
    }
