"""The HTTP session the Kubernetes client talks through, with the environment's proxy read once.

The library's HTTP session trusts the environment, so aiohttp looks for a proxy
(`HTTPS_PROXY`, `NO_PROXY`) and a `.netrc` login on a worker thread for every request: two
thread hops per call. Here the proxy the environment names for the API server (when the
kubeconfig names none) is read once, when the client is built, and the session does not look
again. (A `.netrc` login is not how Kubernetes authenticates; the kubeconfig's credentials are
used as before.)
"""

from __future__ import annotations

import contextlib
from typing import Any

import aiohttp
import aiohttp.helpers
import yarl

READ_BUFSIZE = 2**21
"""The session's read buffer, as kubernetes-asyncio sets it (a watch event can be large)."""


def read_proxy_once(rest: Any, host: str) -> None:
    """Give the client's REST layer `rest` the proxy the environment names for `host` (unless
    the kubeconfig named one), and a session on the same connector that does not look again."""
    if rest.proxy is None:
        with contextlib.suppress(LookupError):
            proxy, auth = aiohttp.helpers.get_env_proxy_for_url(yarl.URL(host))
            rest.proxy = str(proxy)
            if auth is not None:
                rest.proxy_headers = {"Proxy-Authorization": auth.encode()}
    trusting = rest.pool_manager
    rest.pool_manager = aiohttp.ClientSession(
        connector=trusting.connector,
        trust_env=False,
        read_bufsize=READ_BUFSIZE,
    )
    trusting.detach()  # the connector is the new session's now
