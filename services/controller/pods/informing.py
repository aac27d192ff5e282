"""What the runtime's one Pod watch and one Node watch have seen, and whose watch each change wakes.

A client-go informer's store and handlers, without the I/O: `kubernetes.KubernetesRuntime` lists
and watches (one Pod watch label-selected to the Pods it manages, one Node watch, shared by every
swarm) and hands each list and event in here. `Informer` keeps the Pods by swarm and the Nodes by
name, each cut down to what `classifying` reads, serves `list_attempts` from them once synced,
and fans each change out to the subscribers of the swarm it concerns: a worker's own failure to
that swarm's watches, a node going NotReady or away to the swarms with Pods on it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import heapq
import logging
from collections.abc import Callable, Container, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, cast

from services.controller.pods import classifying, runtime

logger = logging.getLogger(__name__)

MEMORY = 10_000
"""Departed, removed and deleted attempts remembered (bounded: a pass outlives them)."""

PODS, NODES = "pods", "nodes"
"""The two watches, as the followers a subscriber waits for and as the API calls name them."""

Key = tuple[str, str]
"""(swarm, execution id) of an attempt."""

_State = tuple[classifying.FailureReason | None, bool]
_HEALTHY: _State = (None, False)
"""What the Pod watch assumes of a Pod it has not seen: no failure, not terminal."""

# What `classifying` reads of a Pod (and `attempt_of` of its labels); the rest is not kept.
_POD_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "labels",
    "creationTimestamp",
    "deletionTimestamp",
)
_POD_STATUS = (
    "phase",
    "reason",
    "startTime",
    "conditions",
    "containerStatuses",
    "initContainerStatuses",
)


class Sync:
    """Whether one watch's cache may be read: listed, and its watch unbroken since.

    Until its first list ends, and while it lists again after 410 Gone, readers wait for the
    list (one list serves every swarm). While the watch is broken (dropped and not yet back, or
    refused), `ready` says no and readers list for themselves, as without a watch: they see
    what the API server says, errors included.
    """

    def __init__(self) -> None:
        self.synced = False
        """Listed once: a subscriber's first wake may come (what it missed, a pass reads)."""
        self._live = False
        self._settled = asyncio.Event()

    def listed(self) -> None:
        self.synced = self._live = True
        self._settled.set()

    def opened(self) -> None:
        """The watch is streaming again from where the cache is."""
        self._live = self.synced
        self._settled.set()

    def relisting(self) -> None:
        self._live = False
        self._settled.clear()

    def broken(self) -> None:
        self._live = False
        self._settled.set()

    async def ready(self) -> bool:
        await self._settled.wait()
        return self._live


@dataclasses.dataclass(frozen=True)
class Feed:
    """Where one watch's lists, events and refusals go, and whether its cache may be read."""

    sync: Sync
    listed: Callable[[Iterable[Mapping[str, Any]], bool, float], None]
    """A list of every object: its items, whether fresh (see `Informer.pods_listed`), and the
    monotonic time it began."""
    note: Callable[[str, Mapping[str, Any]], None]
    """One ADDED / MODIFIED / DELETED event."""
    fail: Callable[[runtime.PodsError], None]
    """The watch was refused."""


@dataclasses.dataclass(frozen=True)
class _Launch:
    swarm: str
    pod: classifying.Pod
    at: float


class Informer:
    """The shared watches' cache of Pods and Nodes, and the subscribers of each swarm.

    Args:
        check_nodes: Whether a Node watch feeds it too.
        removed: Attempts the runtime removed (their Pods' deletion is no news).
        departed: Where the final state of a Pod the cluster deleted is remembered.
    """

    def __init__(
        self,
        *,
        check_nodes: bool,
        removed: Container[Key],
        departed: collections.OrderedDict[Key, classifying.Pod],
    ) -> None:
        self.pods = Sync()
        self.nodes = Sync() if check_nodes else None
        self.pod_feed = Feed(self.pods, self.pods_listed, self.pod_event, self.fail)
        self.node_feed = (
            None
            if self.nodes is None
            else Feed(self.nodes, self.nodes_listed, self.node_event, self.fail)
        )
        self._removed = removed
        self._departed = departed
        self._by_swarm: dict[str, dict[str, classifying.Pod]] = {}
        self._swarm_of: dict[str, str] = {}  # Pod name -> swarm
        self._states: dict[str, _State] = {}
        self._deadlines: dict[str, datetime] = {}
        self._node_of: dict[str, str] = {}  # Pod name -> node, while the Pod may run
        self._bound: dict[str, dict[str, str]] = {}  # node -> Pod name -> swarm
        self._nodes: dict[str, classifying.Node] = {}
        # Pods this runtime created that the watch has not shown yet, by name.
        self._launched: dict[str, _Launch] = {}
        self._deleted: collections.OrderedDict[str, None] = collections.OrderedDict()  # uids
        self._subscribers: dict[str, set[Wake]] = {}

    # Readers.

    async def ready(self) -> bool:
        """Wait for a list under way; whether the cache may be read now."""
        syncs = [self.pods] if self.nodes is None else [self.pods, self.nodes]
        return all([await sync.ready() for sync in syncs])

    def pods_of(self, swarm: str) -> list[classifying.Pod]:
        """The swarm's Pods: the watch's, and those created since that it has not shown yet."""
        cached = self._by_swarm.get(swarm, {})
        pods = list(cached.values())
        pods.extend(
            launch.pod
            for name, launch in self._launched.items()
            if launch.swarm == swarm and name not in cached
        )
        return pods

    def pod(self, name: str) -> classifying.Pod | None:
        """The Pod named `name` as the watch last showed it (or as just created), or None."""
        launch = self._launched.get(name)
        return self._cached(name) or (launch.pod if launch is not None else None)

    def node_map(self) -> dict[str, classifying.Node] | None:
        """Nodes by name (a copy), or None without a Node watch."""
        return None if self.nodes is None else dict(self._nodes)

    # Subscribers.

    def subscribe(self, swarm: str) -> Wake:
        """A new watch of the swarm: its first wake asks for a full pass, once every watch
        has listed."""
        wake = Wake({PODS} if self.nodes is None else {PODS, NODES})
        self._subscribers.setdefault(swarm, set()).add(wake)
        if self.pods.synced:
            wake.started(PODS)
        if self.nodes is not None and self.nodes.synced:
            wake.started(NODES)
        for name in self._by_swarm.get(swarm, {}):
            if (deadline := self._deadlines.get(name)) is not None:
                wake.at(deadline)
        wake.relist()
        return wake

    def unsubscribe(self, swarm: str, wake: Wake) -> None:
        wakes = self._subscribers.get(swarm)
        if wakes is not None:
            wakes.discard(wake)
            if not wakes:
                del self._subscribers[swarm]

    def fail(self, error: runtime.PodsError) -> None:
        """A watch was refused: every subscriber's watch raises it (and is followed again)."""
        for wake in self._every_wake():
            wake.fail(error)

    def close(self) -> None:
        """End every subscriber's watch; readers list for themselves from now on."""
        for wake in self._every_wake():
            wake.close()
        self.pods.broken()
        if self.nodes is not None:
            self.nodes.broken()

    # Writes from the runtime.

    def launched(self, pod: Mapping[str, Any], at: float) -> None:
        """Keep a Pod the API server just created (its answer) until the watch shows it, so a
        pass in between does not count the attempt missing."""
        trimmed = trim_pod(pod)
        meta = trimmed.get("metadata") or {}
        name, uid = meta.get("name"), meta.get("uid")
        swarm = (meta.get("labels") or {}).get(runtime.LABEL_SWARM)
        if not name or not uid or not swarm or uid in self._deleted:
            return
        cached = self._by_swarm.get(self._swarm_of.get(name, ""), {}).get(name)
        if cached is None or (cached.get("metadata") or {}).get("uid") != uid:
            self._launched[name] = _Launch(swarm, trimmed, at)

    # The Pod watch.

    def pods_listed(self, items: Iterable[Mapping[str, Any]], fresh: bool, began: float) -> None:
        """A list of every managed Pod, begun at monotonic time `began`.

        Fresh (the first list, or one after a broken watch): changes went unseen, so every
        subscriber is asked for a full pass. Otherwise (a resync) only what differs from the
        watch's view wakes, as its events would have.
        """
        now = datetime.now(UTC)
        listed: set[str] = set()
        for item in items:
            pod = trim_pod(item)
            name = (pod.get("metadata") or {}).get("name")
            if not name:
                continue
            listed.add(name)
            if not fresh and _version(self._cached(name)) == _version(pod):
                continue
            self._store(name, pod, announce=not fresh, now=now)
        for name in [n for n in self._swarm_of if n not in listed]:
            swarm = self._forget(name)
            if not fresh and swarm is not None:
                for wake in self._wakes_of(swarm):
                    wake.relist()
        self._launched = {
            n: launch
            for n, launch in self._launched.items()
            if launch.at >= began and n not in listed
        }
        for wake in self._every_wake():
            wake.started(PODS)
            if fresh:
                wake.relist()

    def pod_event(self, kind: str, item: Mapping[str, Any]) -> None:
        """One ADDED / MODIFIED / DELETED event of the Pod watch."""
        pod = trim_pod(item)
        meta = pod.get("metadata") or {}
        name, uid = meta.get("name"), meta.get("uid")
        if not name:
            return
        launch = self._launched.get(name)
        if launch is not None and (launch.pod.get("metadata") or {}).get("uid") == uid:
            del self._launched[name]
        if kind != "DELETED":
            self._store(name, pod, announce=True, now=datetime.now(UTC))
            return
        if uid:
            remember(self._deleted, uid, None)
        self._forget(name)
        key = key_of(pod)
        if key is None or key not in self._removed:
            # A Pod this runtime removed leaves nothing for a pass to do.
            if key is not None:
                remember(self._departed, key, pod)
            for wake in self._wakes_of((meta.get("labels") or {}).get(runtime.LABEL_SWARM)):
                wake.relist()

    def _store(self, name: str, pod: classifying.Pod, *, announce: bool, now: datetime) -> None:
        swarm = ((pod.get("metadata") or {}).get("labels") or {}).get(runtime.LABEL_SWARM)
        if self._swarm_of.get(name) not in (None, swarm):
            self._forget(name)  # relabelled away from its swarm (not one of ours any more)
        if not swarm:
            return
        self._by_swarm.setdefault(swarm, {})[name] = pod
        self._swarm_of[name] = swarm
        failure = classifying.classify(pod, None, now)
        terminal = classifying.is_terminal(pod)
        node = (pod.get("spec") or {}).get("nodeName")
        self._bind(name, swarm, node if node and not terminal else None)
        before = self._states.get(name, _HEALTHY)
        self._states[name] = (failure, terminal)
        if announce and before != (failure, terminal):
            if failure is None or failure is classifying.FailureReason.IMAGE_PULL:
                # Finished, recovered or stuck pulling (its node may yet say node_lost).
                for wake in self._wakes_of(swarm):
                    wake.relist()
            elif failure != before[0] and (attempt := attempt_of(pod, None, now)) is not None:
                # The worker's own status proves it: no Node can change this reason.
                for wake in self._wakes_of(swarm):
                    wake.failed(attempt)
        deadline = classifying.next_deadline(pod) if failure is None else None
        if deadline is not None and self._deadlines.get(name) != deadline:
            # Nothing about the Pod may change when its grace runs out: wake then anyway.
            self._deadlines[name] = deadline
            for wake in self._wakes_of(swarm):
                wake.at(deadline)

    def _forget(self, name: str) -> str | None:
        swarm = self._swarm_of.pop(name, None)
        if swarm is not None:
            _discard(self._by_swarm, swarm, name)
        self._states.pop(name, None)
        self._deadlines.pop(name, None)
        self._bind(name, "", None)
        return swarm

    def _bind(self, name: str, swarm: str, node: str | None) -> None:
        old = self._node_of.pop(name, None)
        if old is not None:
            _discard(self._bound, old, name)
        if node is not None:
            self._node_of[name] = node
            self._bound.setdefault(node, {})[name] = swarm

    def _cached(self, name: str) -> classifying.Pod | None:
        return self._by_swarm.get(self._swarm_of.get(name, ""), {}).get(name)

    # The Node watch.

    def nodes_listed(self, items: Iterable[Mapping[str, Any]], fresh: bool, began: float) -> None:
        """A list of every Node: the swarms with Pods on a node whose readiness differs from
        what the watch last saw are asked for a full pass."""
        del fresh, began  # a Node list wakes only the swarms it concerns, whatever came before
        assert self.nodes is not None
        before = {name: classifying.node_ready(node) for name, node in self._nodes.items()}
        self._nodes = {}
        for item in items:
            node = trim_node(item)
            if name := (node.get("metadata") or {}).get("name"):
                self._nodes[name] = node
        if self.nodes.synced:
            changed = {
                name
                for name in before.keys() | self._nodes.keys()
                if before.get(name, False) != classifying.node_ready(self._nodes.get(name))
            }
            self._tell_bound(changed)
        for wake in self._every_wake():
            wake.started(NODES)

    def node_event(self, kind: str, item: Mapping[str, Any]) -> None:
        """One event of the Node watch: a node's readiness changed, or it is gone."""
        node = trim_node(item)
        name = (node.get("metadata") or {}).get("name")
        if not name:
            return
        known = self._nodes.get(name)
        if kind == "DELETED":
            self._nodes.pop(name, None)
        else:
            self._nodes[name] = node
            if known is not None and classifying.node_ready(known) == classifying.node_ready(node):
                return
        self._tell_bound({name})

    def _tell_bound(self, nodes: Iterable[str]) -> None:
        swarms = {swarm for node in nodes for swarm in self._bound.get(node, {}).values()}
        for swarm in swarms:
            for wake in self._wakes_of(swarm):
                wake.relist()

    # Fan-out.

    def _wakes_of(self, swarm: str | None) -> list[Wake]:
        return list(self._subscribers.get(swarm, ())) if swarm else []

    def _every_wake(self) -> list[Wake]:
        return [wake for wakes in self._subscribers.values() for wake in wakes]


class Wake:
    """Coalesced wakes for one watch consumer, with timed wakes and a follower's fatal error.

    No wake is given before every follower has listed once: a change in between would be in
    neither the pass the first wake starts nor any event.
    """

    def __init__(self, followers: set[str]) -> None:
        self._unlisted = set(followers)
        self._event = asyncio.Event()
        self._poke = asyncio.Event()
        self._deadlines: list[datetime] = []
        self._error: runtime.PodsError | None = None
        self._closed = False
        self._failed: dict[str, runtime.Attempt] = {}
        self._relist = False

    def relist(self) -> None:
        self._relist = True
        self._set()

    def failed(self, attempt: runtime.Attempt) -> None:
        self._failed[attempt.execution_id] = attempt
        self._set()

    def _set(self) -> None:
        self._event.set()
        self._poke.set()

    def _take(self) -> runtime.Change:
        change = runtime.Change(tuple(self._failed.values()), self._relist)
        self._failed, self._relist = {}, False
        return change

    def started(self, follower: str) -> None:
        self._unlisted.discard(follower)
        self._poke.set()

    def at(self, when: datetime) -> None:
        heapq.heappush(self._deadlines, when)
        self._poke.set()

    def fail(self, error: runtime.PodsError) -> None:
        self._error = error
        self._set()

    def close(self) -> None:
        self._closed = True
        self._set()

    async def wait(self) -> runtime.Change | None:
        """Wait for the next wake; None once the watch is closed."""
        while True:
            if self._error is not None:
                raise self._error
            if self._closed:
                return None
            if self._unlisted:
                self._poke.clear()
                await self._poke.wait()
                continue
            if self._event.is_set():
                self._event.clear()
                return self._take()
            now = datetime.now(UTC)
            if self._deadlines and self._deadlines[0] <= now:
                while self._deadlines and self._deadlines[0] <= now:
                    heapq.heappop(self._deadlines)
                self._relist = True
                return self._take()
            timeout = (self._deadlines[0] - now).total_seconds() if self._deadlines else None
            self._poke.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._poke.wait()


def trim_pod(pod: Mapping[str, Any]) -> classifying.Pod:
    """The part of a Pod that classification reads: identity, labels, node, status."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName")
    trimmed: dict[str, Any] = {
        "metadata": {k: meta[k] for k in _POD_METADATA if k in meta},
        "status": {k: status[k] for k in _POD_STATUS if k in status},
    }
    if node:
        trimmed["spec"] = {"nodeName": node}
    witness = (meta.get("annotations") or {}).get(runtime.ANNOTATION_DECISION)
    if witness:
        # Only the decision a replacement carries: what the controller writes back when Redis
        # lost it.
        trimmed["metadata"]["annotations"] = {runtime.ANNOTATION_DECISION: witness}
    return cast(classifying.Pod, trimmed)


def trim_node(node: Mapping[str, Any]) -> classifying.Node:
    """The part of a Node that classification reads: its name and Ready condition."""
    conditions = (node.get("status") or {}).get("conditions") or ()
    trimmed = {
        "metadata": {"name": (node.get("metadata") or {}).get("name")},
        "status": {"conditions": [c for c in conditions if c.get("type") == "Ready"]},
    }
    return cast(classifying.Node, trimmed)


def attempt_of(
    pod: classifying.Pod, nodes: Mapping[str, classifying.Node] | None, now: datetime
) -> runtime.Attempt | None:
    """The attempt a worker Pod runs, classified; None for a Pod without complete labels."""
    labels = pod.get("metadata", {}).get("labels") or {}
    try:
        return runtime.Attempt(
            swarm=labels[runtime.LABEL_SWARM],
            seat=labels[runtime.LABEL_SEAT],
            execution_id=labels[runtime.LABEL_EXECUTION],
            generation=int(labels[runtime.LABEL_GENERATION]),
            failure=classifying.classify(pod, nodes, now),
            alive=not classifying.is_terminal(pod),
            witness=(pod.get("metadata", {}).get("annotations") or {}).get(
                runtime.ANNOTATION_DECISION
            ),
        )
    except (KeyError, ValueError):
        # Not one of ours after all (someone copied the managed-by label): not an attempt.
        logger.warning("ignoring Pod %s: its attempt labels are incomplete", name_of(pod))
        return None


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


def _discard(index: dict[str, dict[str, Any]], outer: str, inner: str) -> None:
    """Remove `inner` from `index[outer]`, and `outer` once it holds nothing."""
    members = index.get(outer)
    if members is not None:
        members.pop(inner, None)
        if not members:
            del index[outer]


def _version(pod: classifying.Pod | None) -> str | None:
    return None if pod is None else (pod.get("metadata") or {}).get("resourceVersion")
