"""The four calls of every replacement, sent straight through the client's HTTP session.

A replacement is four API calls: its Pod and its credential Secret created, the lost attempt's
Pod and Secret deleted. Through the client library each also goes through a generated wrapper
(checking its keyword arguments, choosing headers) and a generic request builder (walking the
path, query and header values, encoding the body with the standard `json`): about a quarter of
the client's CPU per call, and in a storm the controller's CPU is what bounds replacements per
second (bench/storm.py). Here those four calls, and only they, are made from a route table on the
same `aiohttp` session, with what the library would send: its default headers, the credentials
of its configuration (`update_params_for_auth`, which also refreshes a token that expires), its
proxy, server name and the call's timeout; the body is encoded once (orjson).

The caller keeps naming the library's API method (its `create_namespaced_pod`, say): the
route is looked up by that method's name, so what the runtime calls stays in one place (the RBAC
test reads it there), and every other method goes through the library as before. No error is
raised for a status: the caller checks it, as for every call it makes with
``_preload_content=False``; a response's headers stay readable (`Retry-After`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote

import aiohttp
import orjson


@dataclasses.dataclass(frozen=True)
class Route:
    """An API method as one HTTP request: its verb, its path (with ``{name}`` and
    ``{namespace}``) and the method's positional parameters, in order."""

    verb: str
    path: str
    params: tuple[str, ...]


ROUTES: Final[Mapping[str, Route]] = {
    "create_namespaced_pod": Route(
        "POST", "/api/v1/namespaces/{namespace}/pods", ("namespace", "body")
    ),
    "create_namespaced_secret": Route(
        "POST", "/api/v1/namespaces/{namespace}/secrets", ("namespace", "body")
    ),
    "delete_namespaced_pod": Route(
        "DELETE", "/api/v1/namespaces/{namespace}/pods/{name}", ("name", "namespace", "body")
    ),
    "delete_namespaced_secret": Route(
        "DELETE", "/api/v1/namespaces/{namespace}/secrets/{name}", ("name", "namespace", "body")
    ),
}
"""The calls sent directly, by the library's method name (CoreV1Api)."""

AUTH_SETTINGS: Final = ["BearerToken"]
"""The library's auth settings for these calls, as its generated wrappers name them."""


def route(method: Callable[..., Any]) -> Route | None:
    """The route of an API method sent directly, or None (the library sends it)."""
    return ROUTES.get(getattr(method, "__name__", ""))


class DirectRequests:
    """The direct calls of one client (the runtime's `kubernetes.ApiClient`).

    Args:
        api_client: The configured client: its configuration (host, credentials), default
            headers and REST layer (session, proxy, server name) are used as they are.
    """

    def __init__(self, api_client: Any) -> None:
        self._api = api_client

    async def send(
        self,
        routed: Route,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        timeout: aiohttp.ClientTimeout,
    ) -> tuple[aiohttp.ClientResponse, bytes]:
        """Send one call of `routed` with the API method's arguments; its response (read and
        released) and body.

        Raises:
            TypeError: an argument the route does not take (a caller's mistake).
            aiohttp.ClientError, TimeoutError, OSError: the API could not be reached.
        """
        values = dict(zip(routed.params, args, strict=False))
        for key, value in kwargs.items():
            if key not in routed.params:
                raise TypeError(f"{key} is not an argument of {routed.path}")
            values[key] = value
        path = routed.path.format(
            **{k: quote(str(v), safe="") for k, v in values.items() if k != "body"}
        )
        api = self._api
        headers: dict[str, str] = {
            "Accept": "application/json",
            "Content-Type": "application/json",
            **api.default_headers,
        }
        if api.cookie:
            headers["Cookie"] = api.cookie
        await api.update_params_for_auth(headers, [], AUTH_SETTINGS)
        body = values.get("body")
        rest = api.rest_client
        request: dict[str, Any] = {
            "data": orjson.dumps(body) if body is not None else None,
            "headers": headers,
            "timeout": timeout,
        }
        if rest.proxy:
            request["proxy"] = rest.proxy
        if rest.proxy_headers:
            request["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            request["server_hostname"] = rest.server_hostname
        url = api.configuration.host + path
        async with rest.pool_manager.request(routed.verb, url, **request) as response:
            return response, await response.read()
