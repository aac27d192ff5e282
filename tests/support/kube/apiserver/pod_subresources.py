"""The Pod subresources that reach the node: ``pods/NAME/log`` (from the node's kubelet) and
``pods/NAME/portforward`` (a tunnel to the Pod's address)."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from tests.support.kube.apiserver import (
    errors,
    store,
    watches,
)
from tests.support.kube.network import portforward


async def port_forward(request: web.Request, entry: watches.Entry) -> web.StreamResponse:
    """``pods/NAME/portforward``: streams to the Pod's ports at its ``status.podIP``, as the
    API server does through the kubelet (`tests.support.kube.network.portforward`)."""
    status = entry.obj.get("status") or {}
    if status.get("phase") != "Running" or not status.get("podIP"):
        name = entry.obj["metadata"]["name"]
        raise errors.ApiError(
            400,
            f"unable to upgrade connection: pod {name} is not running: "
            f"{status.get('phase') or 'Pending'}",
        )
    address = status["podIP"]

    async def dial(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(address, port)

    return await portforward.serve(request, dial)


async def log(objects: store.Store, request: web.Request, entry: watches.Entry) -> web.Response:
    """``pods/NAME/log``: the container's log, fetched from the kubelet of the Pod's node
    (its InternalIP and kubelet endpoint port, as the API server does)."""
    pod = entry.obj
    name = pod["metadata"]["name"]
    spec = pod.get("spec") or {}
    containers = [c["name"] for c in spec.get("containers") or ()]
    inits = [c["name"] for c in spec.get("initContainers") or ()]
    container = request.query.get("container")
    if not container:
        if len(containers) != 1 or inits:
            more = f" or one of the init containers: [{' '.join(inits)}]" if inits else ""
            raise errors.ApiError(
                400,
                f"a container name must be specified for pod {name}, choose one of: "
                f"[{' '.join(containers)}]{more}",
            )
        container = containers[0]
    if container not in containers + inits:
        raise errors.ApiError(400, f"container {container} is not valid for pod {name}")
    node = objects.get("nodes", spec["nodeName"]) if spec.get("nodeName") else None
    if node is None:
        raise errors.ApiError(400, f"pod {name} does not have a host assigned")
    status = node.get("status") or {}
    port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
    address = next(
        (a["address"] for a in status.get("addresses") or () if a.get("type") == "InternalIP"),
        None,
    )
    url = f"http://{address}:{port}/containerLogs/{pod['metadata']['namespace']}/{name}/"
    params = {k: v for k, v in request.query.items() if k in ("previous", "tailLines")}
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(url + container, params=params) as answer,
        ):
            text = await answer.text()
            if answer.status != 200:
                raise errors.ApiError(400, text)
    except aiohttp.ClientError as exc:
        raise errors.ApiError(
            500, f'Get "{url}{container}": the kubelet does not answer ({exc})'
        ) from exc
    return web.Response(text=text, content_type="text/plain")
