"""Locate the real agent CLIs (Claude Code, Codex) that `make setup` installs under .harnesses/.

They are pinned test dependencies: nothing is downloaded at test time, and a test that needs a
missing CLI fails loudly (never skips) and says to run `make setup`. `make qualify` runs the same
tests against other versions by setting AGENTIHOOKS_CLAUDE_CODE_VERSION / AGENTIHOOKS_CODEX_VERSION,
and AGENTIHOOKS_QUALIFIED_VERSIONS naming the version under test, as an operator names a version
they qualified (`qualified_versions_env`).

Besides the pinned Codex, the newest Codex (CODEX_NEWEST_VERSION, outside the spec's 0.162) is
installed too: the tests of `agentihooks-restorer qualify` qualify it and resume with it once the
setting names it.
"""

from __future__ import annotations

import os
import pathlib
import shutil

from services.common import qualified_versions

# The pinned versions. They must match CLAUDE_CODE_VERSION and CODEX_VERSION in the Makefile,
# which installs exactly these into .harnesses/.
CLAUDE_CODE_VERSION = "2.1.112"
CODEX_VERSION = "0.162.0"
# The newest Codex on npm, not qualified by default (Makefile: CODEX_NEWEST_VERSION).
CODEX_NEWEST_VERSION = "0.171.0"

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


def codex_executable(version: str | None = None) -> str:
    """The absolute path of the real `codex` of `version` (default: the version under test),
    or fail the test."""
    return _installed("codex", version or codex_version(), "codex")


def qualified_versions_env() -> dict[str, str]:
    """`AGENTIHOOKS_QUALIFIED_VERSIONS` of this process (`make qualify` sets it to the version
    under test), for the restorer's harness environment; empty when unset."""
    value = os.environ.get(qualified_versions.VARIABLE, "")
    return {qualified_versions.VARIABLE: value} if value else {}


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
