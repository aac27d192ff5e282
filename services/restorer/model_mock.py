"""A loopback mock of the model APIs the real agent CLIs call, recording what they send.

Shipped with the restorer: `agentihooks-restorer qualify` runs the CLI installed in a worker
image against it (no network, no account), and the real-CLI tests use the same server.
It listens on 127.0.0.1 only.

- Anthropic `POST /v1/messages` (Claude Code with `ANTHROPIC_BASE_URL` and a dummy
  `ANTHROPIC_API_KEY`): a short reply, as server-sent events when the request asks to stream,
  else one JSON message. `POST /v1/messages/count_tokens` answers a small count.
- OpenAI `POST /v1/responses` (Codex through a `model_providers` entry with
  `wire_api = "responses"`): a short reply as server-sent events.

Every POST is recorded as `Call(path, body)` with the raw body bytes, so a test can see exactly
which history a CLI sent. Headers are not recorded (they carry the dummy key). The reply text
is `REPLY` unless the server was given another.

With `record`, each call is also appended to that file as one JSON line `{"path", "body"}`.
"""

from __future__ import annotations

import dataclasses
import http.server
import json
import pathlib
import threading
import uuid
from typing import Any

REPLY = "Understood; continuing."


@dataclasses.dataclass(frozen=True)
class Call:
    """One request a CLI sent: its path and its JSON body."""

    path: str
    body: dict[str, Any]
    raw: bytes = dataclasses.field(repr=False)


def turns(call: Call) -> list[tuple[str, str]]:
    """The conversation a request carries: (role, text) of every text part, in order.

    Anthropic: `messages[].content` (a string, or blocks of type `text`). OpenAI Responses:
    `input[]` messages with `input_text` / `output_text` parts.
    """
    out: list[tuple[str, str]] = []
    messages = call.body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        role, content = str(message.get("role", "")), message.get("content")
        if isinstance(content, str):
            out.append((role, content))
            continue
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "text":
                out.append((role, str(block.get("text", ""))))
    items = call.body.get("input")
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict) or item.get("type", "message") != "message":
            continue
        speaker = item.get("role")
        if speaker not in ("user", "assistant"):
            continue
        parts = item.get("content")
        for part in parts if isinstance(parts, list) else []:
            if isinstance(part, dict) and part.get("type") in ("input_text", "output_text"):
                out.append((str(speaker), str(part.get("text", ""))))
    return out


def _sse(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return b"".join(
        f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events
    )


def anthropic_reply(model: str, text: str, *, stream: bool) -> tuple[str, bytes]:
    """(content type, body) of a Messages API answer holding `text`."""
    message_id = f"msg_{uuid.uuid4().hex[:24]}"
    usage = {"input_tokens": 12, "output_tokens": 6}
    message = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }
    if not stream:
        return "application/json", json.dumps(message).encode()
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    return "text/event-stream", _sse(
        [
            ("message_start", {"type": "message_start", "message": start}),
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": text},
                },
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 6},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
    )


def responses_reply(model: str, text: str) -> tuple[str, bytes]:
    """(content type, body) of a Responses API stream holding `text`."""
    response_id = f"resp_{uuid.uuid4().hex[:24]}"
    item_id = f"msg_{uuid.uuid4().hex[:24]}"
    item = {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    response = {
        "id": response_id,
        "object": "response",
        "model": model,
        "status": "completed",
        "output": [item],
        "usage": {
            "input_tokens": 12,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 6,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 18,
        },
    }
    in_progress = {**response, "status": "in_progress", "output": []}
    return "text/event-stream", _sse(
        [
            ("response.created", {"type": "response.created", "response": in_progress}),
            (
                "response.output_item.added",
                {
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "item": {**item, "status": "in_progress", "content": []},
                },
            ),
            (
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "item_id": item_id,
                    "output_index": 0,
                    "content_index": 0,
                    "delta": text,
                },
            ),
            (
                "response.output_item.done",
                {"type": "response.output_item.done", "output_index": 0, "item": item},
            ),
            ("response.completed", {"type": "response.completed", "response": response}),
        ]
    )


def codex_provider(base_url: str, key_variable: str) -> str:
    """Codex's `config.toml` naming the mock at `base_url` as its model provider (Responses
    API), with the dummy key read from `key_variable`."""
    return (
        'model = "mock-model"\n'
        'model_provider = "mock"\n'
        "[model_providers.mock]\n"
        'name = "mock"\n'
        f'base_url = "{base_url}/v1"\n'
        'wire_api = "responses"\n'
        f'env_key = "{key_variable}"\n'
    )


class ModelApi:
    """The mock server on 127.0.0.1, in a thread of this process."""

    def __init__(self, *, reply: str = REPLY, record: pathlib.Path | None = None) -> None:
        self.reply = reply
        self.calls: list[Call] = []
        self._record = record
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ModelApi:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> ModelApi:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def calls_to(self, path: str) -> list[Call]:
        with self._lock:
            return [call for call in self.calls if call.path == path]

    def conversation_calls_since(self, start: int) -> list[Call]:
        """The requests after the first `start` that carry a conversation (not token counts
        or side requests)."""
        with self._lock:
            later = self.calls[start:]
        return [c for c in later if c.path.endswith(("/messages", "/responses")) and turns(c)]

    def call_count(self) -> int:
        with self._lock:
            return len(self.calls)

    def _note(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)
            if self._record is not None:
                line = json.dumps({"path": call.path, "body": call.body}, ensure_ascii=False)
                with self._record.open("a", encoding="utf-8") as handle:
                    handle.write(line + "\n")

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._send(404, "application/json", b'{"error": "not found"}')

            do_HEAD = do_GET

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                path = self.path.split("?", 1)[0]
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = {}
                api._note(Call(path, body if isinstance(body, dict) else {}, raw))
                model = str(body.get("model", "mock")) if isinstance(body, dict) else "mock"
                if path.endswith("/messages/count_tokens"):
                    self._send(200, "application/json", b'{"input_tokens": 12}')
                elif path.endswith("/messages"):
                    stream = isinstance(body, dict) and body.get("stream") is True
                    self._send(200, *anthropic_reply(model, api.reply, stream=stream))
                elif path.endswith("/responses"):
                    self._send(200, *responses_reply(model, api.reply))
                else:
                    self._send(404, "application/json", b'{"error": "not found"}')

        return Handler
