"""The kubelet's log endpoint, which the API server's ``pods/NAME/log`` reads from."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from tests.support.kube.node import pods


async def serve(log_path: Callable[..., Path]) -> tuple[web.AppRunner, int]:
    """Serve containers' logs as a kubelet does for the API server's ``pods/log``:
    ``GET /containerLogs/NAMESPACE/POD/CONTAINER`` (``previous``, ``tailLines``), plain
    text, on a free port of the node's address (advertised as its kubelet endpoint).

    Args:
        log_path: The kubelet's `Kubelet.log_path`.

    Returns:
        The running server (``cleanup`` stops it) and its port.
    """

    async def container_logs(request: web.Request) -> web.Response:
        info = request.match_info
        previous = request.query.get("previous", "").lower() in ("true", "1")
        try:
            path = log_path(info["namespace"], info["pod"], info["container"], previous=previous)
        except KeyError:
            which = "previous terminated container" if previous else "container"
            return web.Response(
                status=404,
                text=f'{which} "{info["container"]}" in pod "{info["pod"]}" has no logs',
            )
        text = path.read_text(errors="replace")
        tail = request.query.get("tailLines")
        if tail and tail.isdigit():
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(tail) :]) if int(tail) else ""
        return web.Response(text=text)

    app = web.Application()
    app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", container_logs)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, pods.HOST_IP, 0)
    await site.start()
    server = site._server
    assert server is not None and server.sockets  # type: ignore[attr-defined]
    return runner, int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
