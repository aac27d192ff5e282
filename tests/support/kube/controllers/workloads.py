"""Workload controllers for the Kubernetes API emulator: Deployments, ReplicaSets and StatefulSets
make Pods, as kube-controller-manager's controllers do, through the API server's REST API only.

With `tests.support.kube.node.kubelet` running the Pods, `kubectl rollout status` then waits on what
really happens: a Deployment is rolled out once its new ReplicaSet's Pods are ready, a
StatefulSet once its Pods are, one ordinal after the other.

- **Deployment**: one ReplicaSet per distinct Pod template, named ``DEPLOYMENT-HASH`` and
  labelled ``pod-template-hash=HASH`` (a hash of the template), owned by the Deployment. The
  newest template's ReplicaSet gets ``spec.replicas``; the older ones are scaled down as the new
  one's Pods become available (``replicas`` less the new ReplicaSet's available Pods), so the
  old Pods serve until the new ones are ready, as with ``maxUnavailable: 0``. Status:
  ``observedGeneration``, ``replicas``, ``updatedReplicas``, ``readyReplicas``,
  ``availableReplicas``, ``unavailableReplicas`` and the ``Available`` and ``Progressing``
  conditions (reason ``NewReplicaSetAvailable`` once the rollout is complete).
- **ReplicaSet**: Pods named ``REPLICASET-XXXXX`` from its template, owned by it (controller
  reference), until it has ``spec.replicas`` active ones (not terminating, not ``Succeeded`` or
  ``Failed``); extras are deleted, not-ready first, then the newest. Status: ``replicas``,
  ``fullyLabeledReplicas``, ``readyReplicas``, ``availableReplicas``, ``observedGeneration``.
- **StatefulSet** (``OrderedReady``, ``RollingUpdate``): Pods ``STATEFULSET-N`` with
  ``hostname``/``subdomain`` (``spec.serviceName``) and the labels
  ``statefulset.kubernetes.io/pod-name`` and ``controller-revision-hash``; for each of
  ``volumeClaimTemplates`` the claim ``CLAIM-STATEFULSET-N`` is created first (and kept when the
  Pod goes) and mounted as the template's volume of that name. Pod N is created once Pods 0 to
  N-1 run and are ready; a failed Pod is deleted and made again; scaling down deletes the
  highest ordinal first, one at a time; after a template change the Pods of the old revision are
  deleted from the highest ordinal down, each once the others are ready, and made again from the
  new template. Status: ``observedGeneration``, ``replicas``, ``readyReplicas``,
  ``availableReplicas``, ``currentReplicas``, ``updatedReplicas``, ``currentRevision`` and
  ``updateRevision`` (equal once every Pod runs the new template).

Not emulated: revision history and rollback (no ControllerRevisions; old ReplicaSets stay at
zero), ``maxSurge``/``maxUnavailable`` arithmetic, ``minReadySeconds``, ``Parallel`` Pod
management, partitions, ``OnDelete``, ``progressDeadlineSeconds``, DaemonSets and Jobs.

Use `controllers(api_url)` (an async context manager) beside
`tests.support.kube.clusters.cluster`.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import hashlib
import json
import logging
import secrets
from collections.abc import AsyncIterator, Mapping
from typing import Any

from tests.support.kube import api_client, objects

log = logging.getLogger(__name__)

APPS = "/apis/apps/v1"
CORE = "/api/v1"
MERGE = "application/merge-patch+json"
RESYNC_S = 1.0
"""How often everything is looked at again, events or not."""


def template_hash(template: Mapping[str, Any]) -> str:
    """A short hash of a Pod template, a valid label value."""
    text = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    return any(
        ref.get("uid") == uid and ref.get("controller")
        for ref in obj["metadata"].get("ownerReferences") or ()
    )


def _owner(obj: Mapping[str, Any], kind: str) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _active(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return not pod["metadata"].get("deletionTimestamp") and phase not in ("Succeeded", "Failed")


def _ready(pod: Mapping[str, Any]) -> bool:
    return _active(pod) and objects.condition(pod, "Ready") == "True"


def _replicas(obj: Mapping[str, Any]) -> int:
    value = (obj.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


class Controllers:
    """The Deployment, ReplicaSet and StatefulSet controllers of one API server."""

    def __init__(self, api_url: str) -> None:
        self._api = api_client.ApiServer(api_url)
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        await self._api.open()

        async def wake(kind: str, obj: dict[str, Any]) -> None:
            self._wake.set()

        self._tasks = [
            asyncio.create_task(
                api_client.inform(self._api, path, {}, wake), name=f"workloads {path}"
            )
            for path in (
                f"{APPS}/deployments",
                f"{APPS}/replicasets",
                f"{APPS}/statefulsets",
                f"{CORE}/pods",
            )
        ]
        self._tasks.append(asyncio.create_task(self._loop(), name="workloads"))

    async def close(self) -> None:
        await api_client.cancel_tasks(self._tasks)
        self._tasks = []
        await self._api.close()

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RESYNC_S):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self.reconcile()
            except (api_client.ApiStatusError, OSError) as exc:
                # A conflict or a vanished object: the next round reads everything again.
                log.debug("workload round failed: %s", exc)

    async def _items(self, path: str) -> list[dict[str, Any]]:
        listing = await self._api.call("GET", path)
        return list(listing.get("items") or ())

    async def reconcile(self) -> None:
        """One round: read everything afresh (so nothing is made twice), then act."""
        pods = await self._items(f"{CORE}/pods")
        for deployment in await self._items(f"{APPS}/deployments"):
            await self._deployment(deployment, await self._items(f"{APPS}/replicasets"))
        for replicaset in await self._items(f"{APPS}/replicasets"):
            await self._replicaset(replicaset, pods)
        for statefulset in await self._items(f"{APPS}/statefulsets"):
            await self._statefulset(statefulset, pods)

    async def _status(self, resource: str, obj: Mapping[str, Any], status: dict[str, Any]) -> None:
        meta = obj["metadata"]
        old = obj.get("status") or {}
        if "conditions" in status:
            # A condition keeps its times while its status and reason stay.
            before = {c.get("type"): c for c in old.get("conditions") or ()}
            status["conditions"] = [
                before[c["type"]]
                if c["type"] in before
                and (before[c["type"]].get("status"), before[c["type"]].get("reason"))
                == (c["status"], c["reason"])
                else c
                for c in status["conditions"]
            ]
        if all(old.get(k) == v for k, v in status.items()):
            return
        await self._api.call(
            "PATCH",
            f"{APPS}/namespaces/{meta['namespace']}/{resource}/{meta['name']}/status",
            body={"status": status},
            content_type=MERGE,
        )

    async def _scale(self, resource: str, obj: Mapping[str, Any], replicas: int) -> None:
        if _replicas(obj) == replicas:
            return
        meta = obj["metadata"]
        await self._api.call(
            "PATCH",
            f"{APPS}/namespaces/{meta['namespace']}/{resource}/{meta['name']}",
            body={"spec": {"replicas": replicas}},
            content_type=MERGE,
        )

    async def _delete_pod(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        with contextlib.suppress(api_client.ApiStatusError):
            await self._api.call(
                "DELETE", f"{CORE}/namespaces/{meta['namespace']}/pods/{meta['name']}"
            )

    # -- Deployments ---------------------------------------------------------------------------

    async def _deployment(
        self, deployment: dict[str, Any], replicasets: list[dict[str, Any]]
    ) -> None:
        meta, spec = deployment["metadata"], deployment.get("spec") or {}
        if meta.get("deletionTimestamp"):
            return
        namespace, desired = meta["namespace"], _replicas(deployment)
        template = copy.deepcopy(spec.get("template") or {})
        digest = template_hash(template)
        owned = [rs for rs in replicasets if _owned_by(rs, meta["uid"])]
        new = next(
            (
                rs
                for rs in owned
                if rs["metadata"].get("labels", {}).get("pod-template-hash") == digest
            ),
            None,
        )
        if new is None:
            labels = {
                **(template.get("metadata") or {}).get("labels", {}),
                "pod-template-hash": digest,
            }
            template.setdefault("metadata", {})["labels"] = labels
            selector = copy.deepcopy(spec.get("selector") or {})
            selector.setdefault("matchLabels", {})["pod-template-hash"] = digest
            body = {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": f"{meta['name']}-{digest}",
                    "namespace": namespace,
                    "labels": labels,
                    "ownerReferences": [_owner(deployment, "Deployment")],
                },
                "spec": {"replicas": desired, "selector": selector, "template": template},
            }
            new = await self._api.call(
                "POST", f"{APPS}/namespaces/{namespace}/replicasets", body=body
            )
            owned.append(new)
        else:
            await self._scale("replicasets", new, desired)
        assert new is not None
        new_status = new.get("status") or {}
        new_available = int(new_status.get("availableReplicas") or 0)
        for old in owned:
            if old["metadata"]["uid"] != new["metadata"]["uid"]:
                target = max(0, desired - new_available)
                if _replicas(old) > target:
                    await self._scale("replicasets", old, target)
        statuses = [rs.get("status") or {} for rs in owned]
        total = sum(int(s.get("replicas") or 0) for s in statuses)
        updated = int(new_status.get("replicas") or 0)
        ready = sum(int(s.get("readyReplicas") or 0) for s in statuses)
        available = sum(int(s.get("availableReplicas") or 0) for s in statuses)
        complete = updated == desired and total == desired and available >= desired
        now = _now()
        await self._status(
            "deployments",
            deployment,
            {
                "observedGeneration": meta.get("generation", 1),
                "replicas": total,
                "updatedReplicas": updated,
                "readyReplicas": ready,
                "availableReplicas": available,
                "unavailableReplicas": max(0, desired - available),
                "conditions": [
                    _condition(
                        "Available",
                        available >= desired,
                        "MinimumReplicasAvailable"
                        if available >= desired
                        else "MinimumReplicasUnavailable",
                        now,
                    ),
                    _condition(
                        "Progressing",
                        True,
                        "NewReplicaSetAvailable" if complete else "ReplicaSetUpdated",
                        now,
                    ),
                ],
            },
        )

    # -- ReplicaSets ---------------------------------------------------------------------------

    async def _replicaset(self, replicaset: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        meta, spec = replicaset["metadata"], replicaset.get("spec") or {}
        if meta.get("deletionTimestamp"):
            return
        namespace, desired = meta["namespace"], _replicas(replicaset)
        mine = [p for p in pods if _owned_by(p, meta["uid"]) and _active(p)]
        for _ in range(desired - len(mine)):
            template = copy.deepcopy(spec.get("template") or {})
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    **(template.get("metadata") or {}),
                    "name": f"{meta['name']}-{secrets.token_hex(3)[:5]}",
                    "namespace": namespace,
                    "ownerReferences": [_owner(replicaset, "ReplicaSet")],
                },
                "spec": template.get("spec") or {},
            }
            mine.append(
                await self._api.call("POST", f"{CORE}/namespaces/{namespace}/pods", body=pod)
            )
        if len(mine) > desired:
            # Not-ready Pods go first, then the newest.
            order = sorted(
                mine,
                key=lambda p: (_ready(p), p["metadata"].get("creationTimestamp", "")),
            )
            for pod in sorted(order[: len(mine) - desired], key=lambda p: p["metadata"]["name"]):
                await self._delete_pod(pod)
            mine = order[len(mine) - desired :]
        ready = sum(1 for p in mine if _ready(p))
        await self._status(
            "replicasets",
            replicaset,
            {
                "observedGeneration": meta.get("generation", 1),
                "replicas": len(mine),
                "fullyLabeledReplicas": len(mine),
                "readyReplicas": ready,
                "availableReplicas": ready,
            },
        )

    # -- StatefulSets --------------------------------------------------------------------------

    async def _statefulset(self, statefulset: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        meta, spec = statefulset["metadata"], statefulset.get("spec") or {}
        if meta.get("deletionTimestamp"):
            return
        name, desired = meta["name"], _replicas(statefulset)
        revision = f"{name}-{template_hash(spec.get('template') or {})}"
        by_ordinal: dict[int, dict[str, Any]] = {}
        for pod in pods:
            suffix = pod["metadata"]["name"].removeprefix(f"{name}-")
            if _owned_by(pod, meta["uid"]) and suffix.isdigit():
                by_ordinal[int(suffix)] = pod
        deleting = any(p["metadata"].get("deletionTimestamp") for p in by_ordinal.values())
        if not deleting:
            await self._statefulset_step(statefulset, by_ordinal, revision)
        existing = [p for p in by_ordinal.values() if not p["metadata"].get("deletionTimestamp")]
        ready = sum(1 for p in existing if _ready(p))
        updated = sum(
            1
            for p in existing
            if p["metadata"].get("labels", {}).get("controller-revision-hash") == revision
        )
        old = statefulset.get("status") or {}
        done = updated == desired == len(existing) and ready == desired
        await self._status(
            "statefulsets",
            statefulset,
            {
                "observedGeneration": meta.get("generation", 1),
                "replicas": len(existing),
                "readyReplicas": ready,
                "availableReplicas": ready,
                "currentReplicas": updated if done else len(existing) - updated,
                "updatedReplicas": updated,
                "updateRevision": revision,
                "currentRevision": revision if done else old.get("currentRevision", revision),
            },
        )

    async def _statefulset_step(
        self, statefulset: dict[str, Any], by_ordinal: dict[int, dict[str, Any]], revision: str
    ) -> None:
        """At most one change: the next missing Pod, a failed one replaced, the highest extra
        one removed, or the highest Pod of an old revision replaced."""
        desired = _replicas(statefulset)
        for ordinal in range(desired):
            pod = by_ordinal.get(ordinal)
            if pod is None:
                await self._create_ordinal(statefulset, ordinal, revision)
                return
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Failed", "Succeeded"):
                await self._delete_pod(pod)
                return
            if not _ready(pod):
                return
        extras = sorted((o for o in by_ordinal if o >= desired), reverse=True)
        if extras:
            await self._delete_pod(by_ordinal[extras[0]])
            return
        for ordinal in sorted(by_ordinal, reverse=True):
            labels = by_ordinal[ordinal]["metadata"].get("labels") or {}
            if labels.get("controller-revision-hash") != revision:
                await self._delete_pod(by_ordinal[ordinal])
                return

    async def _create_ordinal(
        self, statefulset: dict[str, Any], ordinal: int, revision: str
    ) -> None:
        meta, spec = statefulset["metadata"], statefulset.get("spec") or {}
        name, namespace = meta["name"], meta["namespace"]
        pod_name = f"{name}-{ordinal}"
        template = copy.deepcopy(spec.get("template") or {})
        pod_spec = template.get("spec") or {}
        volumes = [
            v
            for v in pod_spec.get("volumes") or ()
            if v.get("name")
            not in {c["metadata"]["name"] for c in spec.get("volumeClaimTemplates") or ()}
        ]
        for claim in spec.get("volumeClaimTemplates") or ():
            claim_name = f"{claim['metadata']['name']}-{pod_name}"
            body = {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {
                    "name": claim_name,
                    "namespace": namespace,
                    "labels": dict((spec.get("selector") or {}).get("matchLabels") or {}),
                },
                "spec": copy.deepcopy(claim.get("spec") or {}),
            }
            try:
                await self._api.call(
                    "POST", f"{CORE}/namespaces/{namespace}/persistentvolumeclaims", body=body
                )
            except api_client.ApiStatusError as exc:
                if exc.code != 409:  # kept from an earlier Pod of this ordinal
                    raise
            volumes.append(
                {
                    "name": claim["metadata"]["name"],
                    "persistentVolumeClaim": {"claimName": claim_name},
                }
            )
        pod_spec["volumes"] = volumes
        pod_spec.setdefault("hostname", pod_name)
        if spec.get("serviceName"):
            pod_spec.setdefault("subdomain", spec["serviceName"])
        labels = {
            **((template.get("metadata") or {}).get("labels") or {}),
            "statefulset.kubernetes.io/pod-name": pod_name,
            "controller-revision-hash": revision,
            "apps.kubernetes.io/pod-index": str(ordinal),
        }
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                **(template.get("metadata") or {}),
                "name": pod_name,
                "namespace": namespace,
                "labels": labels,
                "ownerReferences": [_owner(statefulset, "StatefulSet")],
            },
            "spec": pod_spec,
        }
        await self._api.call("POST", f"{CORE}/namespaces/{namespace}/pods", body=pod)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(kind: str, status: bool, reason: str, now: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": "True" if status else "False",
        "reason": reason,
        "lastUpdateTime": now,
        "lastTransitionTime": now,
    }


@contextlib.asynccontextmanager
async def controllers(api_url: str) -> AsyncIterator[Controllers]:
    """The workload controllers of the API server at `api_url`, stopped on exit."""
    running = Controllers(api_url)
    await running.start()
    try:
        yield running
    finally:
        await running.close()
