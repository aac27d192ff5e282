"""A fenced attempt's Claude Code session that grows, as a running agent's does."""

from __future__ import annotations

import json
import pathlib

from tests.integration.restorer import sidecar_support as kit


def session_path(scene: kit.Scene) -> pathlib.Path:
    """The fenced attempt's Claude Code session file."""
    return next((scene.fenced_home / ".claude" / "projects").rglob("*.jsonl"))


def grow(scene: kit.Scene, size: int, label: str = "more") -> int:
    """Append complete records of about `size` bytes to the session; the bytes appended."""
    lines: list[bytes] = []
    while sum(map(len, lines)) < size:
        text = json.dumps({"type": "assistant", "n": len(lines), "text": f"{label} " * 40})
        lines.append(text.encode() + b"\n")
    with session_path(scene).open("ab") as handle:
        handle.write(b"".join(lines))
    return sum(map(len, lines))
