"""Find the real binaries the tests need; a missing one fails the test loudly, never skips it."""

from __future__ import annotations

import os
import pathlib
import shutil
import sys

import pytest


def require(name: str) -> str:
    """The absolute path of `name` on PATH or in the virtualenv, or fail the test."""
    venv_bin = pathlib.Path(sys.executable).parent
    candidate = venv_bin / name
    if candidate.exists() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is required by this test and was not found: run `make setup`")
    return found
