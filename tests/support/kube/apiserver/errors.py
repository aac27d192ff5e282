"""Errors as the API server answers them: Status objects with the real codes, reasons and
messages."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """A request the emulator answers with a Status object."""

    def __init__(self, code: int, message: str, reason: str | None = None, **details: Any):
        super().__init__(message)
        self.code, self.message, self.reason, self.details = code, message, reason, details


def status_body(error: ApiError) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": error.message,
        "reason": error.reason or REASONS.get(error.code, "Unknown"),
        "code": error.code,
    }
    details = {k: v for k, v in error.details.items() if k != "retry_after"}
    if details:
        body["details"] = details
    return body


def status_response(error: ApiError) -> web.Response:
    headers = {}
    if error.details.get("retry_after") is not None:
        headers["Retry-After"] = str(int(error.details["retry_after"]))
    return web.Response(
        status=error.code,
        body=json.dumps(status_body(error)),
        content_type="application/json",
        headers=headers,
    )


def json_response(code: int, obj: Any) -> web.Response:
    """An answer of `obj` as JSON with HTTP status `code`."""
    return web.Response(status=code, body=json.dumps(obj), content_type="application/json")
