"""What the runtime's one Pod watch and one Node watch have seen, and whose watch each change wakes.

A client-go informer's store and handlers, without the I/O: `kubernetes.KubernetesRuntime` lists
and watches (one Pod watch label-selected to the Pods it manages, one Node watch, shared by every
swarm) and hands each list and event in here (`feeds.Feed`). `Informer` keeps the Pods by swarm
and the Nodes by name, each cut down to what `classifying` reads (`cached_bodies`), serves
`list_attempts` from them once synced, and fans each change out to the subscribers
(`wakes.Wake`) of the swarm it concerns: a worker's own failure to that swarm's watches, a node
going NotReady or away to the swarms with Pods on it.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Container, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from services.controller.pods import attempts, cached_bodies, classifying, feeds, runtime, wakes

PODS, NODES = "pods", "nodes"
"""The two watches, as the followers a subscriber waits for and as the API calls name them."""

_State = tuple[classifying.FailureReason | None, bool]
_HEALTHY: _State = (None, False)
"""What the Pod watch assumes of a Pod it has not seen: no failure, not terminal."""


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
        removed: Container[attempts.Key],
        departed: collections.OrderedDict[attempts.Key, classifying.Pod],
    ) -> None:
        self.pods = feeds.Sync()
        self.nodes = feeds.Sync() if check_nodes else None
        self.pod_feed = feeds.Feed(self.pods, self.pods_listed, self.pod_event, self.fail)
        self.node_feed = (
            None
            if self.nodes is None
            else feeds.Feed(self.nodes, self.nodes_listed, self.node_event, self.fail)
        )
        self._removed = removed
        self._departed = departed
        self._by_swarm: dict[str, dict[str, classifying.Pod]] = {}
        self._swarm_of: dict[str, str] = {}  # Pod name -> swarm
        self._states: dict[str, _State] = {}
        self._reads: dict[str, attempts.Read] = {}  # Pod name -> the Pod cached, read once
        self._deadlines: dict[str, datetime] = {}
        self._node_of: dict[str, str] = {}  # Pod name -> node, while the Pod may run
        self._bound: dict[str, dict[str, str]] = {}  # node -> Pod name -> swarm
        self._nodes: dict[str, classifying.Node] = {}
        # Pods this runtime created that the watch has not shown yet, by name.
        self._launched: dict[str, _Launch] = {}
        self._deleted: collections.OrderedDict[str, None] = collections.OrderedDict()  # uids
        self._subscribers: dict[str, set[wakes.Wake]] = {}

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

    def swarms(self) -> set[str]:
        """The swarms with a Pod in the cache (or just created)."""
        found = {swarm for swarm, pods in self._by_swarm.items() if pods}
        found.update(launch.swarm for launch in self._launched.values())
        return found

    def pod(self, name: str) -> classifying.Pod | None:
        """The Pod named `name` as the watch last showed it (or as just created), or None."""
        launch = self._launched.get(name)
        return self._cached(name) or (launch.pod if launch is not None else None)

    def read(self, pod: classifying.Pod) -> attempts.Read:
        """The Pod read (`attempts.read`): a Pod of the cache as it was read when the watch
        showed it, so a resync classifies each version of a Pod once, not on every list."""
        found = self._reads.get((pod.get("metadata") or {}).get("name", ""))
        return found if found is not None and found.pod is pod else attempts.read(pod)

    def node_map(self) -> dict[str, classifying.Node] | None:
        """Nodes by name (a copy), or None without a Node watch."""
        return None if self.nodes is None else dict(self._nodes)

    # Subscribers.

    def subscribe(self, swarm: str) -> wakes.Wake:
        """A new watch of the swarm: its first wake asks for a full pass, once every watch
        has listed."""
        wake = wakes.Wake({PODS} if self.nodes is None else {PODS, NODES})
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

    def unsubscribe(self, swarm: str, wake: wakes.Wake) -> None:
        subscribed = self._subscribers.get(swarm)
        if subscribed is not None:
            subscribed.discard(wake)
            if not subscribed:
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
        trimmed = cached_bodies.trim_pod(pod)
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
            pod = cached_bodies.trim_pod(item)
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
        pod = cached_bodies.trim_pod(item)
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
            attempts.remember(self._deleted, uid, None)
        self._forget(name)
        key = attempts.key_of(pod)
        if key is None or key not in self._removed:
            # A Pod this runtime removed leaves nothing for a pass to do.
            if key is not None:
                attempts.remember(self._departed, key, pod)
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
        found = self._reads[name] = attempts.read(pod)
        failure = classifying.verdict(found.evidence, None, now)
        terminal = found.evidence.terminal
        node = found.evidence.node
        self._bind(name, swarm, node if node and not terminal else None)
        before = self._states.get(name, _HEALTHY)
        self._states[name] = (failure, terminal)
        if announce and before != (failure, terminal):
            if failure is None or failure is classifying.FailureReason.IMAGE_PULL:
                # Finished, recovered or stuck pulling (its node may yet say node_lost).
                for wake in self._wakes_of(swarm):
                    wake.relist()
            elif (
                failure != before[0]
                and (attempt := attempts.attempt_at(found, None, now)) is not None
            ):
                # The worker's own status proves it: no Node can change this reason.
                for wake in self._wakes_of(swarm):
                    wake.failed(attempt)
        deadline = found.evidence.next_deadline() if failure is None else None
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
        self._reads.pop(name, None)
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
            node = cached_bodies.trim_node(item)
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
        node = cached_bodies.trim_node(item)
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

    def _wakes_of(self, swarm: str | None) -> list[wakes.Wake]:
        return list(self._subscribers.get(swarm, ())) if swarm else []

    def _every_wake(self) -> list[wakes.Wake]:
        return [wake for subscribed in self._subscribers.values() for wake in subscribed]


def _discard(index: dict[str, dict[str, Any]], outer: str, inner: str) -> None:
    """Remove `inner` from `index[outer]`, and `outer` once it holds nothing."""
    members = index.get(outer)
    if members is not None:
        members.pop(inner, None)
        if not members:
            del index[outer]


def _version(pod: classifying.Pod | None) -> str | None:
    return None if pod is None else (pod.get("metadata") or {}).get("resourceVersion")
