"""Creating and deleting an attempt's Pod and its credential Secret on Kubernetes.

The part of `kubernetes.KubernetesRuntime` that writes: it receives the runtime's CoreV1Api
object and its request wrapper (`KubernetesRuntime._request`: raw body, failures mapped onto
`runtime.PodsError`) and never imports the Kubernetes client itself. Which attempts were removed
stays the runtime's bookkeeping; this module only makes the calls.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import orjson

from services.common import waiting
from services.controller.pods import event_bodies, informing, notices, runtime, templates


class Body(dict):  # type: ignore[type-arg]
    """A request body this runtime built: JSON already (dicts, lists, text, numbers)."""


class Request(Protocol):
    """`KubernetesRuntime._request`: one API call, returning status and raw body."""

    def __call__(
        self,
        what: str,
        method: Callable[..., Awaitable[Any]],
        *args: Any,
        tolerate: frozenset[int] = ...,
        quiet: bool = ...,
        **kwargs: Any,
    ) -> Awaitable[tuple[int, bytes]]: ...


class PodLauncher:
    """Launches and removes worker attempts as a Pod with a Secret owned by it."""

    def __init__(
        self,
        core: Any,
        request: Request,
        namespace: str,
        template: Mapping[str, Any],
        *,
        restorer_image: str | None,
        worker_env: Mapping[str, str],
        informer: Callable[[], informing.Informer | None],
        record: Callable[..., None],
    ) -> None:
        """Args:
        core: The runtime's CoreV1Api (every call goes through `request`).
        request: The runtime's request wrapper.
        namespace: Where worker Pods and their Secrets live.
        template: The worker Pod template (`templates.render_pod`).
        restorer_image: The sidecar image; the worker image when None.
        worker_env: Settings every worker Pod gets (the template overrides them).
        informer: The runtime's shared watches now, None while they are not running.
        record: Posts an Event (`recording.EventRecorder.record`).
        """
        self._core = core
        self._request = request
        self._namespace = namespace
        self._template = template
        self._restorer_image = restorer_image
        self._worker_env = worker_env
        self._informer = informer
        self._record = record

    async def launch(self, spec: runtime.LaunchSpec) -> None:
        """Create the attempt's Pod (sidecar injected), then its credential Secret owned by it.

        The Pod goes first so the Secret can name it as owner (the cluster then deletes the
        Secret with the Pod, whoever deletes that); the kubelet waits for a missing Secret. The
        created Pod is listed from then on, even before the shared watch shows it.
        """
        name = templates.pod_name(spec.swarm, spec.execution_id)
        try:
            pod = templates.render_pod(
                self._template,
                spec,
                namespace=self._namespace,
                restorer_image=self._restorer_image,
                defaults=self._worker_env,
            )
        except ValueError as exc:
            raise runtime.PodsRefused(f"launch {name}: {exc}") from None
        status, body = await self._request(
            "create pod",
            self._core.create_namespaced_pod,
            self._namespace,
            Body(pod),
            tolerate=frozenset({409}),
        )
        if status == 409:
            _, body = await self._request(
                "read pod", self._core.read_namespaced_pod, name, self._namespace
            )
        existing = orjson.loads(body)
        if status < 300 and (informer := self._informer()) is not None:
            informer.launched(existing, time.monotonic())
        if status < 300:
            notice = notices.launched(spec.swarm, spec.seat, spec.execution_id, spec.generation)
            if notice is not None:
                pod_ref = event_bodies.PodRef(name, existing["metadata"].get("uid"))
                self._record(notice, regarding=pod_ref)
        labels = existing["metadata"].get("labels") or {}
        if (labels.get(runtime.LABEL_SWARM), labels.get(runtime.LABEL_EXECUTION)) != (
            spec.swarm,
            spec.execution_id,
        ):
            raise runtime.PodsRefused(f"launch {name}: the Pod name is held by another attempt")
        await self._own_secret(spec, existing["metadata"]["uid"])

    async def _own_secret(self, spec: runtime.LaunchSpec, owner_uid: str) -> None:
        """Create the attempt's credential Secret, owned by its Pod; or update the one left."""
        secret = templates.render_secret(spec, namespace=self._namespace, owner_uid=owner_uid)
        status, _ = await self._request(
            "create secret",
            self._core.create_namespaced_secret,
            self._namespace,
            Body(secret),
            tolerate=frozenset({409}),
            quiet=True,
        )
        if status == 409:
            # Left by an interrupted launch, perhaps with a credential since re-minted.
            await self._request(
                "update secret",
                self._core.patch_namespaced_secret,
                secret["metadata"]["name"],
                self._namespace,
                {
                    "metadata": {"ownerReferences": secret["metadata"]["ownerReferences"]},
                    "data": secret["data"],
                },
                quiet=True,
            )

    async def remove(self, swarm: str, execution_id: str) -> None:
        """Delete the attempt's Pod (no grace: the fence already took its authority) and Secret."""
        options = Body(gracePeriodSeconds=0, propagationPolicy="Background")
        await waiting.both(
            self._request(
                "delete pod",
                self._core.delete_namespaced_pod,
                templates.pod_name(swarm, execution_id),
                self._namespace,
                body=options,
                tolerate=frozenset({404}),
            ),
            self._request(
                "delete secret",
                self._core.delete_namespaced_secret,
                templates.secret_name(swarm, execution_id),
                self._namespace,
                body=options,
                tolerate=frozenset({404}),
                quiet=True,
            ),
        )
