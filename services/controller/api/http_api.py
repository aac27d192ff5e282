"""The controller's HTTP API: restore decisions, the pause switch, swarm status, metrics, health,
and the pages (the swarm panel and each swarm's ledger; see `pages`).

This layer only translates: it reads a bearer credential and a JSON body, resolves who the
caller is once and asks the policy (`authorizing`), calls the swarm's `Recovery`, and writes
JSON. Refusals become HTTP statuses in one place (`STATUS`); anything unexpected becomes `500
internal error` and is logged by type only, because an exception's message may hold values
that must never reach a caller or a log.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from aiohttp import web

from services.common import addresses, errors, logs, rpc, tls, tls_settings, tokens
from services.controller import authorizing, metrics, policy, recovering
from services.controller import hub as controller_hub
from services.controller.api import forwarding, pages, status_bodies
from services.controller.state import keys, reading, records, scripting

log = logging.getLogger("services.controller.http")

HUB: Final = web.AppKey("hub", controller_hub.Hub)
CALLER: Final = web.RequestKey("caller", authorizing.Caller)
"""The call's caller, resolved once by `_authenticated` before the route runs."""

MAX_BODY_BYTES: Final = 64 * 1024
"""A decision body is a few dozen bytes; anything near this is not one."""

STATUS: Final[Mapping[errors.Kind, int]] = {
    errors.Kind.MALFORMED: 400,
    errors.Kind.UNAUTHENTICATED: 401,
    errors.Kind.FORBIDDEN: 403,
    errors.Kind.NOT_FOUND: 404,
    errors.Kind.REFUSED: 409,
    errors.Kind.TOO_LARGE: 413,
    errors.Kind.UNAVAILABLE: 503,
}
"""The one mapping of refusal kinds to HTTP statuses."""

CHOICES: Final = {c.value: c for c in records.Choice}
BODY_FIELDS: Final = frozenset({"choice", "agent"})

_NO_STORE: Final = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# Errors.


def _json(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.json_response(data, status=status, headers={**_NO_STORE, **(headers or {})})


def refusal_response(refusal: errors.Refusal) -> web.Response:
    """A refusal as `{"reason": …, "message": …}` with the status of its kind."""
    headers = {"WWW-Authenticate": "Bearer"} if refusal.kind is errors.Kind.UNAUTHENTICATED else {}
    return _json(
        {"reason": refusal.reason, "message": refusal.message}, STATUS[refusal.kind], headers
    )


def _route(request: web.Request) -> str:
    # The route's template, not the path: a path carries caller-chosen text.
    info = request.match_info.route.resource
    return info.canonical if info is not None else "unmatched"


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status == 404:
            return refusal_response(errors.NotFound("not_found", "no such route"))
        if exc.status < 400:
            raise
        # Routing answers (405 and the like): same JSON shape, aiohttp's status and headers.
        reason = (exc.reason or "error").lower()
        return _json(
            {"reason": reason.replace(" ", "_"), "message": reason},
            exc.status,
            {k: v for k, v in exc.headers.items() if k.lower() == "allow"},
        )
    except Exception as exc:
        refusal = recovering.refusal_of(exc)
        if refusal is not None:
            return refusal_response(refusal)
        logs.event(
            log,
            "http_failed",
            logging.ERROR,
            method=request.method,
            route=_route(request),
            exception=type(exc).__name__,
        )
        return _json({"reason": "internal", "message": "internal error"}, 500)


AUTHENTICATED_PREFIX = "/v1/"
"""The API routes: each checks the caller's credential before anything else."""


@web.middleware
async def _authenticated(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Check the bearer credential of every API call before its route, body or names are
    looked at: no credential and a forged one get the same answer whatever the call names
    (an unknown execution is not told apart from a known one)."""
    if request.path.startswith(AUTHENTICATED_PREFIX):
        caller = request.app[HUB].principals.caller(_token(request))
        await caller.principal(_named_swarm(request))
        request[CALLER] = caller
    return await handler(request)


def _named_swarm(request: web.Request) -> str | None:
    """The swarm a route names (not yet validated): whose masters to look the caller up
    among first."""
    info = request.match_info
    return info.get("swarm") or keys.swarm_of(info.get("execution", ""))


# Callers and bodies.


def _token(request: web.Request) -> str | None:
    return tokens.bearer({"authorization": request.headers.get("Authorization", "")})


async def _caller(request: web.Request, swarm: str | None) -> records.Principal:
    """The call's principal for `swarm`, as `_authenticated` resolved it."""
    return await request[CALLER].principal(swarm)


async def _authorized(
    request: web.Request, swarm: str | None, action: policy.Action
) -> records.Principal:
    """The call's principal, once the policy lets it do `action` in `swarm`."""
    principal = await _caller(request, swarm)
    await authorizing.authorize(request.app[HUB].client, swarm, action, principal)
    return principal


async def _body(request: web.Request) -> Mapping[str, Any]:
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise errors.TooLarge("too_large", "the request body is too large") from None
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise errors.Malformed("malformed", "the request body is not JSON") from None
    if not isinstance(body, dict):
        raise errors.Malformed("malformed", "the request body must be a JSON object")
    unknown = set(body) - BODY_FIELDS
    if unknown:
        # A misspelt `agent` must not quietly become a decision in the operator's name.
        raise errors.Malformed("malformed", "unknown field: " + ", ".join(sorted(unknown)))
    return body


def _decision_request(body: Mapping[str, Any]) -> tuple[records.Choice, str | None]:
    choice = body.get("choice")
    if not isinstance(choice, str) or choice not in CHOICES:
        raise errors.Malformed("malformed", 'choice must be "resume" or "fresh"')
    agent = body.get("agent")
    if agent is not None and (not isinstance(agent, str) or not agent.strip()):
        raise errors.Malformed("malformed", "agent must be a non-empty string")
    return CHOICES[choice], agent


# The API.


async def restore_decision(request: web.Request) -> web.Response:
    """`POST /v1/executions/{execution}/restore-decision`: choose resume or fresh now."""
    execution = request.match_info["execution"]
    swarm = keys.swarm_of(execution)
    if swarm is None:
        raise errors.NotFound("execution_not_found", "no such execution")
    caller = await _caller(request, swarm)
    choice, agent = _decision_request(await _body(request))
    recovery = await request.app[HUB].recovery(swarm)
    try:
        result = await recovery.restore_decision(execution, choice, agent, caller)
    except scripting.LeaseLost:
        return await _forward(request, swarm)
    return _json({**result.decision.to_json(), "repeated": result.repeated})


async def _forward(request: web.Request, swarm: str) -> web.Response:
    """Send a write that reached a replica without the swarm's lease on to the replica that
    holds it (`forwarding`) and answer with its answer."""
    relayed = await forwarding.http(request.app[HUB], request, swarm)
    return web.Response(
        body=relayed.body,
        status=relayed.status,
        headers={**_NO_STORE, "Content-Type": relayed.content_type},
    )


async def swarm_status(request: web.Request) -> web.Response:
    """`GET /v1/swarms/{swarm}/status`: tasks, seats and handoff cards (operator or master)."""
    swarm = request.match_info["swarm"]
    caller = await _authorized(request, swarm, policy.Action.READ)
    hub = request.app[HUB]
    status = await (await hub.recovery(swarm)).status()
    return _json(status_bodies.status(status, hub.runtime_name, caller))


async def swarm_panel(request: web.Request) -> web.Response:
    """`GET /v1/swarms`: the swarm panel's data: every swarm the caller may read (each one for
    the operator, its own for a master) with its seats counted (`panel_row`)."""
    hub = request.app[HUB]
    caller = await _authorized(request, None, policy.Action.LIST)
    rows = []
    for name in await reading.swarm_names(hub.client):
        if not keys.is_name(name):
            continue
        # A master reads the swarms its credential is registered in, each one looked up
        # among that swarm's own masters.
        try:
            await _authorized(request, name, policy.Action.READ)
        except errors.ForbiddenScope:
            continue
        rows.append(status_bodies.panel_row(await (await hub.recovery(name)).status()))
    return _json({"caller": status_bodies.role(caller), "swarms": rows})


async def unpause(request: web.Request) -> web.Response:
    """`POST /v1/swarms/{swarm}/unpause`: clear the swarm's recovery-paused switch, as
    `UnpauseRecovery` does and for the operator only (anyone else: forbidden_scope). The
    credential is checked first, then the swarm named, then the switch is written (by the
    lease holder: forwarded to it when this replica does not hold the lease)."""
    swarm = request.match_info["swarm"]
    await _authorized(request, swarm, policy.Action.SWITCH)
    recovery = await request.app[HUB].recovery(swarm)
    try:
        await recovery.unpause()
    except scripting.LeaseLost:
        return await _forward(request, swarm)
    logs.event(log, "recovery_unpaused", swarm=swarm)
    return _json({"swarm": swarm, "paused": await recovery.paused()})


async def render_metrics(request: web.Request) -> web.Response:
    """`GET /metrics`: the Prometheus exposition (no credential: it holds only counts)."""
    body = await request.app[HUB].render_metrics()
    return web.Response(body=body, headers={"Content-Type": metrics.CONTENT_TYPE})


async def healthz(request: web.Request) -> web.Response:
    """`GET /healthz`: 200 while this process serves."""
    return _json({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """`GET /readyz`: 200 while this replica serves (Redis answers, it has joined its peers):
    every replica answers every call, forwarding writes to the swarm's lease holder; 503
    `redis_unavailable` or `starting` otherwise."""
    reason = request.app[HUB].not_ready()
    if reason is None:
        return _json({"status": "ready"})
    raise reason


# Pages.


async def index(request: web.Request) -> web.Response:
    """`GET /`: the swarm panel (its data comes from `GET /v1/swarms`, with the tab's
    credential: the page itself names no swarm)."""
    return pages.PANEL.response()


async def ledger(request: web.Request) -> web.Response:
    """`GET /swarms/{swarm}/ledger`: the ledger page (its data comes from the status route);
    for a swarm that does not exist, a readable 404 page that says so and links back to the
    panel."""
    swarm = request.match_info["swarm"]
    if not keys.is_name(swarm) or swarm not in await reading.swarm_names(request.app[HUB].client):
        return pages.missing_swarm(swarm)
    return pages.LEDGER.response()


# Serving.


def make_app(hub: controller_hub.Hub) -> web.Application:
    """The controller's HTTP application over `hub`."""
    app = web.Application(middlewares=[_errors, _authenticated], client_max_size=MAX_BODY_BYTES)
    app[HUB] = hub
    app.router.add_post("/v1/executions/{execution}/restore-decision", restore_decision)
    app.router.add_get("/v1/swarms", swarm_panel)
    app.router.add_get("/v1/swarms/{swarm}/status", swarm_status)
    app.router.add_post("/v1/swarms/{swarm}/unpause", unpause)
    app.router.add_get("/metrics", render_metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/", index)
    app.router.add_get("/swarms/{swarm}/ledger", ledger)
    return app


async def start_http(
    hub: controller_hub.Hub, listen: str, tls_conf: tls_settings.TLSSettings | None = None
) -> tuple[web.AppRunner, int]:
    """Serve the HTTP API on `listen` (HOST:PORT; port 0 picks a free port), over HTTPS when
    `tls_conf` (default: the process's environment) has a certificate.

    Returns:
        The runner (call `await runner.cleanup()` to stop) and the port it listens on.
    """
    try:
        host, port = addresses.parse(listen, listening=True)
    except addresses.Malformed as exc:
        shown = addresses.shown(listen)
        raise addresses.Malformed(
            f"the HTTP address must be HOST:PORT, not {shown}: {exc}"
        ) from None
    runner = web.AppRunner(make_app(hub), handle_signals=False)
    await runner.setup()
    try:
        tls_conf = tls_settings.from_environment() if tls_conf is None else tls_conf
        site = web.TCPSite(runner, host, port, ssl_context=tls.http_server_context(tls_conf))
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise rpc.ListenError.of(listen, exc) from None
    except BaseException:
        await runner.cleanup()
        raise
    bound = int(runner.addresses[0][1])
    transport = tls_settings.transport(tls_conf)
    logs.event(log, "http_listening", host=host, port=bound, transport=transport)
    return runner, bound
