"""The loopback model mock, with one turn's answer held open mid-stream.

`HeldModelApi` is `model_mock.ModelApi` (the shipped mock, unchanged for every other request)
with a hold: while armed with a prompt, a conversation request whose last user text is that
prompt is recorded, answered with the opening events of a streamed reply (the message begun,
part of its text sent), and then left open, as a model still generating would. The CLI that
sent it is in the middle of its turn and waits; a test kills it there. `release` ends the hold
(the held connections are closed without the rest of the reply) and answers later requests
normally, whatever they carry.
"""

from __future__ import annotations

import http.server
import io
import json
import threading
from typing import Any

from services.restorer import model_mock

PARTIAL_TEXT = "A partial answer the killed CLI never completed"
"""The only text of a held reply: the model's answer as far as it was streamed."""
HOLD_LIMIT_S = 900.0
"""A held connection is closed after this long even when nobody releases it."""


def _sse(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def _anthropic_opening(model: str) -> bytes:
    """A Messages API stream up to the middle of its first text block."""
    message: dict[str, Any] = {
        "id": "msg_held000000000000000000",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 1},
    }
    return b"".join(
        (
            _sse("message_start", {"type": "message_start", "message": message}),
            _sse(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
            _sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": PARTIAL_TEXT},
                },
            ),
        )
    )


def _responses_opening(model: str) -> bytes:
    """A Responses API stream up to the middle of its first output message."""
    item_id = "msg_held000000000000000000"
    response = {
        "id": "resp_held00000000000000000",
        "object": "response",
        "model": model,
        "status": "in_progress",
        "output": [],
    }
    item = {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "in_progress",
        "content": [],
    }
    return b"".join(
        (
            _sse("response.created", {"type": "response.created", "response": response}),
            _sse(
                "response.output_item.added",
                {"type": "response.output_item.added", "output_index": 0, "item": item},
            ),
            _sse(
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "item_id": item_id,
                    "output_index": 0,
                    "content_index": 0,
                    "delta": PARTIAL_TEXT,
                },
            ),
        )
    )


class HeldModelApi(model_mock.ModelApi):
    """The model mock; while armed, the turn carrying the armed prompt is held open."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._armed: str | None = None
        self._released = threading.Event()
        self.held: list[model_mock.Call] = []

    def hold(self, prompt: str) -> None:
        """Hold the answer to the next conversation request whose last user text is
        `prompt` (and to any later one, until `release`)."""
        self._released.clear()
        self._armed = prompt

    def release(self) -> None:
        """End every hold: held connections close, later requests are answered normally."""
        self._armed = None
        self._released.set()

    def stop(self) -> None:
        self.release()
        super().stop()

    def _held(self, call: model_mock.Call) -> bool:
        armed = self._armed
        if armed is None or not call.path.endswith(("/messages", "/responses")):
            return False
        users = [text for role, text in model_mock.turns(call) if role == "user"]
        return bool(users) and users[-1] == armed

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        api = self
        answering: type[http.server.BaseHTTPRequestHandler] = super()._handler()

        class Handler(answering):  # type: ignore[misc, valid-type]
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = {}
                call = model_mock.Call(
                    self.path.split("?", 1)[0], body if isinstance(body, dict) else {}, raw
                )
                if not api._held(call):
                    # Answered by the shipped mock, which reads the body itself.
                    connection = self.rfile
                    self.rfile = io.BytesIO(raw)
                    try:
                        super().do_POST()
                    finally:
                        self.rfile = connection
                    return
                api._note(call)
                api.held.append(call)
                model = str(call.body.get("model", "mock"))
                opening = (
                    _anthropic_opening(model)
                    if call.path.endswith("/messages")
                    else _responses_opening(model)
                )
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                try:
                    self.wfile.write(opening)
                    self.wfile.flush()
                except OSError:
                    return
                api._released.wait(HOLD_LIMIT_S)
                self.close_connection = True

        return Handler
