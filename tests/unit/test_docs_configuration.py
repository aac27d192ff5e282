"""The operator guide's configuration table lists every variable any command reads.

The variables are found in the code itself: every `AGENTIHOOKS_…` name the services spell out,
and every name the settings loaders read under the prefix; plus the agent CLIs' own variables
the restorer follows.
"""

from __future__ import annotations

import pathlib
import re

from services.common import settings

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOADERS = re.compile(r'_(?:get|required|address|absolute_path|bool|int|secret)\(env, "([A-Z_]+)"')
SPELLED = re.compile(r"AGENTIHOOKS_[A-Z][A-Z_]*[A-Z]")
PREFIXED = re.compile(r'PREFIX \+ "([A-Z_]+)"')


def read_by_the_code() -> set[str]:
    found: set[str] = set(settings.HARNESS_VARIABLES)
    for path in (ROOT / "services").rglob("*.py"):
        if "proto" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        found |= set(SPELLED.findall(text))
        found |= {settings.PREFIX + name for name in LOADERS.findall(text)}
        found |= {settings.PREFIX + name for name in PREFIXED.findall(text)}
    return found


def test_every_variable_the_code_reads_is_in_the_guides_table() -> None:
    guide = (ROOT / "docs" / "operator-guide.md").read_text(encoding="utf-8")
    table = "\n".join(line for line in guide.splitlines() if line.startswith("| `"))
    missing = sorted(name for name in read_by_the_code() if name not in table)
    assert not missing, f"not in the configuration table of docs/operator-guide.md: {missing}"
    assert "AGENTIHOOKS_REDIS_URL" in read_by_the_code()  # the scan finds the loaders' names
