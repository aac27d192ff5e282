"""Harness adapters by the name checkpoint records use (`claude_code`, `codex`)."""

from __future__ import annotations

from services.restorer.harness import base, claude_code, codex

NAMES = (claude_code.NAME, codex.NAME)


def for_name(name: str) -> base.Harness:
    """The harness a checkpoint record or swarm declaration names.

    Raises:
        ValueError: no harness has that name.
    """
    if name == claude_code.NAME:
        return claude_code.ClaudeCode()
    if name == codex.NAME:
        return codex.Codex()
    raise ValueError("unknown harness")
