"""The Kubernetes API's error statuses mapped onto the runtime's errors (`runtime.PodsError`).

The only place that knows Kubernetes error shapes: a temporary status (or no answer at all)
is `runtime.PodsUnavailable`, anything else `runtime.PodsRefused`.
"""

from __future__ import annotations

import json
from typing import Any

from services.controller.pods import runtime

TEMPORARY = frozenset({0, 429, 500, 502, 503, 504})
"""Statuses that say the API does not answer now (0: no status at all)."""


def unreachable(what: str, exc: BaseException) -> runtime.PodsUnavailable:
    return runtime.PodsUnavailable(
        f"{what}: the Kubernetes API is unreachable ({type(exc).__name__})"
    )


def error(what: str, status: int, body: bytes | str | None, response: Any) -> runtime.PodsError:
    """Map an API status (and its Status body) onto the runtime's errors."""
    reason, message = "", ""
    try:
        parsed = json.loads(body or b"{}")
        if isinstance(parsed, dict):
            reason, message = str(parsed.get("reason") or ""), str(parsed.get("message") or "")
    except ValueError:
        pass
    text = f"{what}: {status} {reason}".rstrip() + (f": {message}" if message else "")
    if status in TEMPORARY:
        retry_after = None
        header = response.headers.get("Retry-After") if response is not None else None
        if header and header.isdigit():
            retry_after = float(header)
        return runtime.PodsUnavailable(text, code=status, retry_after=retry_after)
    return runtime.PodsRefused(text, code=status)
