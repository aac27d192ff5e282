"""Harness adapters by the name checkpoint records use (`claude_code`, `codex`)."""

from __future__ import annotations

from collections.abc import Mapping

from services.restorer.harness import base, claude_code, codex

NAMES = (claude_code.NAME, codex.NAME)


ENVIRONMENT = (claude_code.CONFIG_DIR_VARIABLE, codex.HOME_VARIABLE)
"""The variables that move where a harness keeps its files; the restorer reads them from the
worker's environment, so capture and restore look where the CLI itself does."""


def for_name(name: str, environ: Mapping[str, str] | None = None) -> base.Harness:
    """The harness a checkpoint record or swarm declaration names.

    `environ` holds the worker's harness variables (`ENVIRONMENT`); None: this process's own.

    Raises:
        ValueError: no harness has that name.
    """
    if name == claude_code.NAME:
        return claude_code.ClaudeCode(environ)
    if name == codex.NAME:
        return codex.Codex(environ)
    raise ValueError("unknown harness")
