"""Fake `claude` and `codex` executables that stand in for the real agent CLIs.

Each is a small Python script (shebang: this interpreter). `--version` prints a configurable
version in the real CLI's format (`2.1.3 (Claude Code)`, `codex-cli 0.162.0`); any other
invocation appends `{"harness", "argv", "cwd", "stdin"}` as one JSON line to the record file and
exits 0. `stdin` is what standard input held when it is a regular file (as the supervisor gives
a prompt too long for an argument), else None: a terminal or a pipe is never read, so the fake
cannot hang on an input nobody closes.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from typing import Any

VERSION_FORMATS = {"claude": "{version} (Claude Code)", "codex": "codex-cli {version}"}
DEFAULT_VERSIONS = {"claude": "2.1.3", "codex": "0.162.0"}

_SCRIPT = """#!{python}
import json, os, stat, sys
NAME = {name!r}
OUTPUT = {output!r}
EXIT = {exit_code!r}
RECORD = {record!r}
if sys.argv[1:] == ["--version"]:
    print(OUTPUT)
    sys.exit(EXIT)
try:
    regular = stat.S_ISREG(os.fstat(0).st_mode)
except OSError:
    regular = False
stdin = os.fdopen(0, "rb").read().decode("utf-8") if regular else None
call = {{"harness": NAME, "argv": sys.argv, "cwd": os.getcwd(), "stdin": stdin}}
with open(RECORD, "a", encoding="utf-8") as handle:
    handle.write(json.dumps(call) + "\\n")
"""


@dataclasses.dataclass(frozen=True)
class FakeHarnesses:
    """Where the fake executables live and where they record their calls."""

    bin_dir: pathlib.Path
    record: pathlib.Path

    def path(self, name: str) -> pathlib.Path:
        """The fake executable `claude` or `codex`."""
        return self.bin_dir / name

    def set_version(self, name: str, version: str) -> None:
        """Make `NAME --version` report `version` in the real CLI's format."""
        self.set_version_output(name, VERSION_FORMATS[name].format(version=version))

    def set_version_output(self, name: str, output: str, exit_code: int = 0) -> None:
        """Make `NAME --version` print exactly `output` and exit with `exit_code`."""
        script = self.path(name)
        script.write_text(
            _SCRIPT.format(
                python=sys.executable,
                name=name,
                output=output,
                exit_code=exit_code,
                record=str(self.record),
            )
        )
        script.chmod(0o755)

    def calls(self) -> list[dict[str, Any]]:
        """Every recorded non-version invocation, oldest first."""
        if not self.record.exists():
            return []
        lines = self.record.read_text(encoding="utf-8").split("\n")
        return [json.loads(line) for line in lines if line]


def install(
    bin_dir: pathlib.Path,
    record: pathlib.Path | None = None,
    claude_version: str = DEFAULT_VERSIONS["claude"],
    codex_version: str = DEFAULT_VERSIONS["codex"],
) -> FakeHarnesses:
    """Write fake `claude` and `codex` into `bin_dir` (created if needed)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    fakes = FakeHarnesses(bin_dir=bin_dir, record=record or bin_dir / "calls.jsonl")
    fakes.set_version("claude", claude_version)
    fakes.set_version("codex", codex_version)
    return fakes
