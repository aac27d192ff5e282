"""Fixtures of the restorer's integration tests: fake harness CLIs, real git repositories."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator

import pytest

from tests.support import fake_harness


@pytest.fixture
def fake_harnesses(tmp_path: pathlib.Path) -> fake_harness.FakeHarnesses:
    """Fake `claude` and `codex` executables in a fresh bin folder of this test."""
    return fake_harness.install(tmp_path / "fake-bin")


@pytest.fixture
def usual_umask() -> Iterator[None]:
    """The umask git's checkout modes are compared under (0644 / 0755)."""
    old = os.umask(0o022)
    yield
    os.umask(old)
