"""What the API server stores, and every write to it: objects by resource with their
resourceVersions, the history of events that watches resume from, the open watches told of each
write, and the dependents that garbage collection follows. Creates, updates (also of
``/status``), bindings and deletes (graceful or at once, with propagation) as the API server
carries them out, with its admission defaults and checks."""

from __future__ import annotations

import base64
import collections
import copy
import datetime
import json
import secrets
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from tests.support.kube.apiserver import (
    errors,
    kinds,
    selectors,
    validation,
    watches,
)


def object_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    return obj["metadata"].get("namespace") or "", obj["metadata"]["name"]


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Store:
    """One cluster's objects and watches (see the module docstring)."""

    def __init__(self, *, history: int) -> None:
        self.by_resource: dict[str, dict[tuple[str, str], watches.Entry]] = {
            r: {} for r in kinds.KINDS
        }
        # Owner uid -> the objects naming it in ownerReferences, so a delete's garbage
        # collection costs O(dependents), not a scan of the whole store.
        self.dependents: dict[str, dict[tuple[str, tuple[str, str]], None]] = {}
        self.rv = 0
        self.history: collections.deque[watches.Event] = collections.deque(maxlen=history)
        self.compacted = 0
        self.watchers: set[watches.Watcher] = set()
        self.hold_deletions = False
        """Keep gracefully deleted Pods bound to a node Terminating until they are removed."""
        self.on_new_namespace: Callable[[str], None] = lambda _: None
        """Called with a namespace's name once it is created (the emulator publishes the CA)."""

    def get(self, resource: str, name: str, namespace: str | None = None) -> Any:
        """A copy of one object, or None."""
        entry = self.by_resource[resource].get((namespace or "", name))
        return json.loads(entry.raw) if entry else None

    def objects(self, resource: str, namespace: str | None = None) -> list[Any]:
        """Copies of every object of a kind (in one namespace when given)."""
        return [
            json.loads(e.raw)
            for (ns, _), e in sorted(self.by_resource[resource].items())
            if namespace is None or ns == namespace
        ]

    def entry(self, resource: str, namespace: str | None, name: str) -> watches.Entry:
        entry = self.by_resource[resource].get((namespace or "", name))
        if entry is None:
            raise errors.ApiError(
                404, f'{resource} "{name}" not found', "NotFound", name=name, kind=resource
            )
        return entry

    def create(self, resource: str, namespace: str | None, body: Any) -> Any:
        kind = kinds.KINDS[resource][0]
        if not isinstance(body, dict) or body.get("kind", kind) != kind:
            raise errors.ApiError(400, f"the body of the request is not a {kind}")
        meta = body.setdefault("metadata", {})
        if meta.get("namespace", namespace) != namespace:
            raise errors.ApiError(
                400, "the namespace of the provided object does not match the request's"
            )
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
        if namespace is not None:
            meta["namespace"] = namespace
        name = str(meta.get("name") or "")
        validation.validate(kind, resource, body)
        if (namespace or "", name) in self.by_resource[resource]:
            raise errors.ApiError(
                409,
                f'{resource} "{name}" already exists',
                "AlreadyExists",
                name=name,
                kind=resource,
            )
        if resource == "pods":
            body["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        for field in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"):
            meta.pop(field, None)
        return self.put(resource, None, self.stamp(resource, body))

    def update(self, resource: str, entry: watches.Entry, body: Any, *, status_only: bool) -> Any:
        old = entry.obj
        if not isinstance(body, dict):
            raise errors.ApiError(400, "the body of the request is not an object")
        meta = body.get("metadata") or {}
        if meta.get("name", old["metadata"]["name"]) != old["metadata"]["name"]:
            raise errors.ApiError(400, "the name of the object does not match the name on the URL")
        version = meta.get("resourceVersion")
        if version and version != old["metadata"]["resourceVersion"]:
            raise errors.ApiError(
                409,
                f'Operation cannot be fulfilled on {resource} "{old["metadata"]["name"]}": the '
                "object has been modified; please apply your changes to the latest version and "
                "try again",
            )
        if status_only:
            new = {**copy.deepcopy(old), "status": copy.deepcopy(body.get("status") or {})}
        else:
            new = copy.deepcopy(body)
            new["metadata"] = {**copy.deepcopy(meta)}
            for field in ("uid", "creationTimestamp", "deletionTimestamp", "namespace", "name"):
                if field in old["metadata"]:
                    new["metadata"][field] = old["metadata"][field]
            if resource != "secrets":
                new["status"] = copy.deepcopy(old.get("status") or {})
            if resource == "pods" and validation.without_images(
                new.get("spec")
            ) != validation.without_images(old.get("spec")):
                raise errors.ApiError(
                    422,
                    f'Pod "{old["metadata"]["name"]}" is invalid: spec: Forbidden: pod updates '
                    "may not change fields other than the container images",
                )
            validation.validate(kinds.KINDS[resource][0], resource, new)
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if resource == "secrets":
            new["data"] = validation.canonical_data(new.get("data"))
        if resource in kinds.SCALED and not status_only:
            validation.default(resource, new)
        if resource == "services":
            # The cluster IP is the server's and cannot change (a replace that leaves it out
            # keeps it, as kubectl's three-way merge does).
            for field in ("clusterIP", "clusterIPs", "type"):
                if field in (old.get("spec") or {}):
                    new.setdefault("spec", {}).setdefault(field, old["spec"][field])
        if resource in kinds.SCALED:
            # The workload's generation counts its spec's changes, not its status's.
            generation = int(old["metadata"].get("generation") or 1)
            changed = new.get("spec") != old.get("spec")
            new["metadata"]["generation"] = generation + 1 if changed else generation
        if new == old:
            return old
        stored = self.put(resource, entry, new)
        meta = stored["metadata"]
        finished = meta.get("deletionTimestamp") and not meta.get("finalizers")
        if finished and not (resource == "pods" and self.hold_deletions):
            self.remove(resource, self.by_resource[resource][object_key(stored)])
        return stored

    def bind(self, entry: watches.Entry, body: Any) -> Any:
        target = (body.get("target") or {}) if isinstance(body, dict) else {}
        if not target.get("name"):
            raise errors.ApiError(422, "Binding is invalid: target.name: Required value")
        if entry.obj.get("spec", {}).get("nodeName"):
            raise errors.ApiError(
                409, f"pod {entry.obj['metadata']['name']} is already assigned to a node"
            )
        self.bind_pod(
            entry.obj["metadata"].get("namespace"), entry.obj["metadata"]["name"], target["name"]
        )
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    def delete(
        self, request: web.Request, resource: str, entry: watches.Entry, raw: bytes
    ) -> web.Response:
        options = json.loads(raw) if raw.strip() else {}
        grace_text = request.query.get("gracePeriodSeconds")
        grace = int(grace_text) if grace_text else options.get("gracePeriodSeconds")
        meta = entry.obj["metadata"]
        wanted = options.get("preconditions") or {}
        for field in ("uid", "resourceVersion"):
            if wanted.get(field) and wanted[field] != meta.get(field):
                raise errors.ApiError(
                    409,
                    f"Precondition failed: {field} in precondition: {wanted[field]}, "
                    f"{field} in object meta: {meta.get(field)}",
                )
        if grace is None:
            grace = entry.obj.get("spec", {}).get("terminationGracePeriodSeconds", 30)
        held = (
            resource == "pods"
            and self.hold_deletions
            and grace != 0
            and bool(entry.obj.get("spec", {}).get("nodeName"))
        )
        if meta.get("finalizers") or held:
            if not meta.get("deletionTimestamp"):
                body = copy.deepcopy(entry.obj)
                body["metadata"]["deletionTimestamp"] = now()
                body["metadata"]["deletionGracePeriodSeconds"] = grace if resource == "pods" else 0
                self.put(resource, entry, body)
            return web.Response(
                body=self.by_resource[resource][object_key(entry.obj)].raw,
                content_type="application/json",
            )
        final = self.remove(resource, entry, orphan=options.get("propagationPolicy") == "Orphan")
        if resource == "pods":
            return errors.json_response(200, final)
        return errors.json_response(
            200,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {"name": meta["name"], "kind": resource, "uid": meta.get("uid")},
            },
        )

    def stamp(self, resource: str, body: dict[str, Any]) -> dict[str, Any]:
        meta = body["metadata"]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now())
        body.setdefault("kind", kinds.KINDS[resource][0])
        body.setdefault("apiVersion", kinds.KINDS[resource][2])
        if resource in kinds.SCALED:
            meta["generation"] = 1
            validation.default(resource, body)
        if resource == "services":
            spec = body.setdefault("spec", {})
            spec.setdefault("type", "ClusterIP")
            if not spec.get("clusterIP"):
                spec["clusterIP"] = self.allocate_ip()
            spec.setdefault("clusterIPs", [spec["clusterIP"]])
        if resource == "secrets":
            data = body.setdefault("data", {})
            for key, value in (body.pop("stringData", None) or {}).items():
                data[key] = base64.b64encode(str(value).encode()).decode()
            body.setdefault("type", "Opaque")
        return body

    def allocate_ip(self) -> str:
        """A free cluster IP in 10.96.0.0/12 (random, so that two emulators on one machine,
        each with a Service proxy, rarely pick the same)."""
        taken = {
            (e.obj.get("spec") or {}).get("clusterIP")
            for e in self.by_resource["services"].values()
        }
        while True:
            number = secrets.randbelow(2**20 - 2) + 1
            address = f"10.{96 + (number >> 16)}.{(number >> 8) & 255}.{number & 255}"
            if address not in taken and not address.endswith(".255"):
                return address

    def put(self, resource: str, old: watches.Entry | None, body: dict[str, Any]) -> Any:
        """Store a new version of an object and tell the watchers."""
        if resource == "secrets" and "stringData" in body:
            body = self.stamp(resource, body)
        if resource == "secrets":
            body["data"] = validation.canonical_data(body.get("data"))
        self.rv += 1
        body["metadata"]["resourceVersion"] = str(self.rv)
        raw = json.dumps(body, separators=(",", ":")).encode()
        key = object_key(body)
        if old is not None:
            self.unindex(resource, old.obj)
        self.by_resource[resource][key] = watches.Entry(body, raw)
        for uid in selectors.owner_uids(body):
            self.dependents.setdefault(uid, {})[(resource, key)] = None
        self.record(
            watches.Event(
                self.rv,
                resource,
                "MODIFIED" if old else "ADDED",
                old.obj if old else None,
                body,
                raw,
            )
        )
        if resource == "namespaces" and old is None:
            self.on_new_namespace(body["metadata"]["name"])
        return json.loads(raw)

    def remove(self, resource: str, entry: watches.Entry, *, orphan: bool = False) -> Any:
        del self.by_resource[resource][object_key(entry.obj)]
        self.unindex(resource, entry.obj)
        final = copy.deepcopy(entry.obj)
        final["metadata"].setdefault("deletionTimestamp", now())
        self.rv += 1
        final["metadata"]["resourceVersion"] = str(self.rv)
        raw = json.dumps(final, separators=(",", ":")).encode()
        self.record(watches.Event(self.rv, resource, "DELETED", entry.obj, final, raw))
        if not orphan:  # the garbage collector, in the foreground of this call for simplicity
            uid = entry.obj["metadata"].get("uid")
            for kind, key in list(self.dependents.get(uid, {}) if uid else ()):
                dependent = self.by_resource[kind].get(key)
                if dependent is not None:
                    self.remove(kind, dependent)
        return final

    def unindex(self, resource: str, obj: Mapping[str, Any]) -> None:
        key = object_key(obj)
        for uid in selectors.owner_uids(obj):
            dependents = self.dependents.get(uid)
            if dependents is not None:
                dependents.pop((resource, key), None)
                if not dependents:
                    del self.dependents[uid]

    def record(self, event: watches.Event) -> None:
        if self.history.maxlen is not None and len(self.history) == self.history.maxlen:
            self.compacted = self.history[0].rv
        self.history.append(event)
        for watcher in self.watchers:
            if watcher.resource == event.resource:
                line = watches.event_line(watcher, event)
                if line is not None:
                    watcher.queue.put_nowait(line)

    def bind_pod(self, namespace: str, name: str, node: str) -> Any:
        """Set a Pod's ``spec.nodeName``, as the scheduler's binding does."""
        entry = self.entry("pods", namespace, name)
        body = copy.deepcopy(entry.obj)
        body["spec"]["nodeName"] = node
        return self.put("pods", entry, body)
