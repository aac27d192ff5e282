"""A folder's contents as one comparable value (for tests of what a restore wrote)."""

from __future__ import annotations

import os
import pathlib


def tree(root: pathlib.Path) -> dict[str, bytes | str]:
    """Relative path -> file bytes, ``-> TARGET`` for a symlink, or ``dir``."""
    found: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        key = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[key] = f"-> {os.readlink(path)}"
        elif path.is_file():
            found[key] = path.read_bytes()
        else:
            found[key] = "dir"
    return found
