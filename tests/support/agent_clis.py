"""Locate the real agent CLIs (Claude Code, Codex) that `make setup` installs under .harnesses/.

They are pinned test dependencies: nothing is downloaded at test time, and a test that needs a
missing CLI fails loudly (never skips) and says to run `make setup`. `make qualify` runs the same
tests against other versions by setting AGENTIHOOKS_CLAUDE_CODE_VERSION / AGENTIHOOKS_CODEX_VERSION.
"""

from __future__ import annotations

import os
import pathlib
import shutil

# The pinned versions. They must match CLAUDE_CODE_VERSION and CODEX_VERSION in the Makefile,
# which installs exactly these into .harnesses/.
CLAUDE_CODE_VERSION = "2.1.112"
CODEX_VERSION = "0.162.0"

CLAUDE_CODE_VERSION_ENV = "AGENTIHOOKS_CLAUDE_CODE_VERSION"
CODEX_VERSION_ENV = "AGENTIHOOKS_CODEX_VERSION"

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
HARNESSES = REPO_ROOT / ".harnesses"


def claude_code_version() -> str:
    """The Claude Code version under test: the env override, else the pinned one."""
    return os.environ.get(CLAUDE_CODE_VERSION_ENV) or CLAUDE_CODE_VERSION


def codex_version() -> str:
    """The Codex version under test: the env override, else the pinned one."""
    return os.environ.get(CODEX_VERSION_ENV) or CODEX_VERSION


def harness_dir(harness: str, version: str) -> pathlib.Path:
    """The npm --prefix folder one version of a harness is installed into."""
    return HARNESSES / f"{harness}-{version}"


def _installed(harness: str, version: str, name: str) -> str:
    executable = harness_dir(harness, version) / "node_modules" / ".bin" / name
    if not (executable.exists() and os.access(executable, os.X_OK)):
        # Imported here so scripts/qualify.py can read the pinned versions without pytest.
        import pytest

        pytest.fail(
            f"{harness} {version} is required by this test and is not installed at {executable}:"
            " run `make setup`"
        )
    return str(executable)


def claude_executable() -> str:
    """The absolute path of the real `claude` of the version under test, or fail the test."""
    return _installed("claude-code", claude_code_version(), "claude")


def codex_executable() -> str:
    """The absolute path of the real `codex` of the version under test, or fail the test."""
    return _installed("codex", codex_version(), "codex")


def harness_path_env(executable: str) -> str:
    """A PATH for running `executable`: its own folder first, then node's, then /usr/bin:/bin.

    An npm `.bin/` entry may be a node script (`#!/usr/bin/env node`, e.g. Claude Code 2.1.112's
    and Codex's), so node must be on PATH.
    """
    folders = [str(pathlib.Path(executable).parent)]
    node = shutil.which("node")
    if node is not None:
        folders.append(str(pathlib.Path(node).parent))
    folders += ["/usr/bin", "/bin"]
    return os.pathsep.join(dict.fromkeys(folders))
