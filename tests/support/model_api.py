"""The loopback model mock the real-CLI tests run the agent CLIs against.

It is a product module, `services.restorer.model_mock` (the restorer's `qualify` command ships
and runs it); the tests use that same server under this name.
"""

from __future__ import annotations

from services.restorer.model_mock import (
    REPLY,
    Call,
    ModelApi,
    anthropic_reply,
    responses_reply,
    turns,
)

__all__ = ["REPLY", "Call", "ModelApi", "anthropic_reply", "responses_reply", "turns"]
