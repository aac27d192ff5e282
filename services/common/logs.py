"""JSON logging: one object per line on stderr.

Secrets and conversation content never reach logs. Callers log identifiers and reason codes only;
as a second line of defence the formatter scrubs anything shaped like a bearer token or a JWT.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
import sys
from typing import Any

_SCRUB = re.compile(
    r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*"
)
REDACTED = "[redacted]"


def scrub(text: str) -> str:
    """Replace anything token-shaped in `text`."""
    return _SCRUB.sub(lambda m: (m.group(1) or "") + REDACTED, text)


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object; `extra={"fields": {...}}` adds fields."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        """Every line carries `time` (UTC, RFC 3339), `level` and `service`. An event line
        starts with its own fields (`{"event": "restore_verified", "execution_id": …}` reads as
        the spec writes it) and ends with those three; any other line is `time`, `level`,
        `service`, `logger`, `message` and its extra fields."""
        fields: dict[str, Any] = getattr(record, "fields", None) or {}
        stamp = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "service": self.service,
        }
        out: dict[str, Any] = {}
        if "event" not in fields:
            out.update(stamp)
            out["logger"] = record.name
            out["message"] = scrub(record.getMessage())
        for key, value in fields.items():
            out[key] = scrub(value) if isinstance(value, str) else value
        if "event" in fields:
            for key, value in stamp.items():
                out.setdefault(key, value)
        if record.exc_info and record.exc_info[0] is not None:
            # The exception's type only: its message may hold values we must not log.
            out["exception"] = record.exc_info[0].__name__
        return json.dumps(out, default=str, ensure_ascii=False)


def configure(service: str, level: int = logging.INFO, stream: Any = None) -> None:
    """Send every log record of this process to stderr as JSON lines."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def event(logger: logging.Logger, name: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one structured event line: `{"event": name, ...fields}`."""
    logger.log(level, name, extra={"fields": {"event": name, **fields}})
