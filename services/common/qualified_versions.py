"""`AGENTIHOOKS_QUALIFIED_VERSIONS`: harness versions an operator qualified beyond the spec's.

The spec qualifies native resume for Claude Code 2.1 and Codex 0.162; those defaults live in the
harness adapters. An operator who ran `agentihooks-restorer qualify` against the CLI in their
worker image names the version here, e.g. `codex=0.171,claude-code=2.2`: each item is
`HARNESS=VERSION`, where HARNESS is a harness's record name (`claude_code`, `codex`) or its
command-line spelling (`claude-code`), and VERSION a dotted numeric prefix compared component by
component (`0.171` covers `0.171.0` and `0.171.3`, not `0.1710.0`). The setting extends the
defaults; it never removes them.

Pure: the settings loader refuses a malformed value at start, and the adapters read the
validated value from the worker's environment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

VARIABLE = "AGENTIHOOKS_QUALIFIED_VERSIONS"
HARNESSES = ("claude_code", "codex")
"""The harnesses' record names (`services.restorer.harness.NAMES` holds the same)."""

_SPELLINGS = {"claude_code": "claude_code", "claude-code": "claude_code", "codex": "codex"}
_PREFIX = re.compile(r"\d{1,9}(?:\.\d{1,9})*")
_SHOWN = 60
EXAMPLE = "codex=0.171,claude-code=2.2"


class MalformedVersions(ValueError):
    """The setting is not a list of `HARNESS=VERSION`; the message is one line naming it."""


def _refuse(item: str) -> MalformedVersions:
    shown = item if len(item) <= _SHOWN else item[:_SHOWN] + "…"
    return MalformedVersions(
        f"{VARIABLE} must be HARNESS=VERSION[,HARNESS=VERSION…] with HARNESS claude-code or"
        f" codex and VERSION a dotted number (e.g. {EXAMPLE}), not {shown!r}"
    )


def harness_named(spelling: str) -> str | None:
    """The record name of the harness `spelling` names (`claude-code` gives `claude_code`)."""
    return _SPELLINGS.get(spelling.strip().lower())


def parse(value: str) -> dict[str, tuple[str, ...]]:
    """The extra qualified version prefixes of each harness, by record name.

    An empty value names none (so does an empty item). Each harness's prefixes keep their
    order, once each.

    Raises:
        MalformedVersions: an item is not `HARNESS=VERSION`, names no known harness, or its
            version is not a dotted number.
    """
    found: dict[str, list[str]] = {}
    for raw in value.split(","):
        item = raw.strip()
        if not item:
            continue  # a stray comma names nothing
        name, equals, version = item.partition("=")
        harness = harness_named(name)
        version = version.strip()
        if not equals or harness is None or not _PREFIX.fullmatch(version):
            raise _refuse(item)
        prefixes = found.setdefault(harness, [])
        if version not in prefixes:
            prefixes.append(version)
    return {name: tuple(prefixes) for name, prefixes in found.items()}


def added_for(environ: Mapping[str, str], harness: str) -> tuple[str, ...]:
    """The prefixes `environ`'s setting adds for `harness` (none when unset).

    Raises:
        MalformedVersions: the setting is malformed (the settings loader refuses it at start,
            so a running service never gets here with one).
    """
    return parse(environ.get(VARIABLE, "")).get(harness, ())
