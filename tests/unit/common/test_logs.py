"""Secrets never reach logs: the formatter scrubs token-shaped text as a second defence."""

from __future__ import annotations

import io
import json
import logging

from services.common import logs, tokens


def test_event_lines_are_json_and_scrub_tokens() -> None:
    """One JSON object per line; anything token-shaped is replaced."""
    _, token = tokens.mint_worker_credential(
        "k" * 40, swarm="s", seat="a", execution_id="e", execution_generation=1
    )
    stream = io.StringIO()
    logs.configure("test", stream=stream)
    log = logging.getLogger("t")
    logs.event(
        log, "restore_verified", execution_id="e-42", recovery="native", note=f"Bearer {token}"
    )
    log.info("header was Bearer %s", token)
    lines = [json.loads(x) for x in stream.getvalue().splitlines()]
    assert lines[0]["event"] == "restore_verified" and lines[0]["execution_id"] == "e-42"
    assert token not in stream.getvalue()
    assert logs.REDACTED in lines[1]["message"]
    logging.getLogger().handlers.clear()
