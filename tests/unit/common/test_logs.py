"""Secrets never reach logs: the formatter scrubs token-shaped text as a second defence."""

from __future__ import annotations

import datetime
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


def test_every_line_has_time_level_and_service_and_events_keep_their_shape() -> None:
    """One line shape: a timestamp, a level and the service on every line, events included;
    an event line still begins with its own fields, as the spec writes `restore_verified`."""
    stream = io.StringIO()
    logger = logging.getLogger("test.shape")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter("restorer"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        logs.event(logger, "restore_verified", execution_id="e-42", recovery="native")
        logger.warning("plain words")
    finally:
        logger.removeHandler(handler)
    event, plain = (json.loads(line) for line in stream.getvalue().splitlines())
    assert list(event)[:3] == ["event", "execution_id", "recovery"]
    for line, level in ((event, "info"), (plain, "warning")):
        assert line["level"] == level and line["service"] == "restorer"
        assert datetime.datetime.fromisoformat(line["time"]).tzinfo is not None
    assert plain["message"] == "plain words"
