"""Harness versions: reading a CLI's version and whether it is qualified for native resume.

Spec: "Native resume is qualified for Claude Code 2.1 and Codex 0.162", plus the versions an
operator qualified and named in `AGENTIHOOKS_QUALIFIED_VERSIONS`. A version qualifies when it
lies under one of those prefixes, component by component.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Mapping, Sequence

from services.common import qualified_versions as qualified_versions_setting
from services.restorer.harness import base

VERSION_TIMEOUT_S = 30.0

_VERSION_TOKEN = re.compile(r"v?(\d+(?:\.\d+)+(?:[-+][0-9A-Za-z.+-]*)?)")
_LEADING_NUMBERS = re.compile(r"\d+(?:\.\d+)*")


def parse_version(output: str) -> str:
    """The first dotted version token of a `--version` output.

    `2.1.3 (Claude Code)` gives `2.1.3`; `codex-cli 0.162.0` gives `0.162.0`; a pre-release
    suffix stays (`2.1.0-beta.1`).

    Raises:
        HarnessError: no version token in the output.
    """
    for token in output.split():
        match = _VERSION_TOKEN.fullmatch(token)
        if match:
            return match.group(1)
    raise base.HarnessError("harness: version not recognised")


def version_components(version: str) -> tuple[int, ...]:
    """The leading numeric components of a version: `2.10.3-rc1` gives (2, 10, 3)."""
    match = _LEADING_NUMBERS.match(version.strip().removeprefix("v"))
    if not match:
        return ()
    return tuple(int(part) for part in match.group(0).split("."))


def version_qualifies(version: str, prefix: str) -> bool:
    """Whether `version` lies under `prefix`, component by component.

    `2.1.3` lies under `2.1`; `2.10.0`, `2.2.0`, `2` and `21.1` do not.
    """
    want = version_components(prefix)
    have = version_components(version)
    return bool(want) and len(have) >= len(want) and have[: len(want)] == want


def qualified_versions(name: str, spec_prefix: str, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The spec's prefix of harness `name`, then those `AGENTIHOOKS_QUALIFIED_VERSIONS` in
    `environ` adds for it.

    A malformed setting adds nothing: the settings loader refuses one at start, and a version
    is never taken as qualified on a value nobody could read.
    """
    try:
        added = qualified_versions_setting.added_for(environ, name)
    except qualified_versions_setting.MalformedVersions:
        added = ()
    return tuple(dict.fromkeys((spec_prefix, *added)))


def qualifies_any(version: str, prefixes: Sequence[str]) -> bool:
    """Whether `version` lies under any of `prefixes` (see `version_qualifies`)."""
    return any(version_qualifies(version, prefix) for prefix in prefixes)


async def run_version(executable: str) -> str:
    """Run `EXECUTABLE --version` and parse what it prints.

    Raises:
        HarnessError: the executable is missing, fails, hangs or prints no version.
    """
    try:
        process = await asyncio.create_subprocess_exec(
            executable,
            "--version",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError:
        raise base.HarnessError("harness: executable not found") from None
    try:
        async with asyncio.timeout(VERSION_TIMEOUT_S):
            stdout, _ = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise base.HarnessError("harness: version command timed out") from None
    except asyncio.CancelledError:
        # A restore refused while the version was still being read leaves no process behind.
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise
    if process.returncode != 0:
        raise base.HarnessError("harness: version command failed")
    return parse_version(stdout.decode("utf-8", errors="replace"))
