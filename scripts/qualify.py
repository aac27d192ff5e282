"""Qualify versions of the real agent CLIs: run the real-CLI test suite against each of them.

Run from the repository root as `python -m scripts.qualify` (`make qualify` does). By default it
qualifies Claude Code at the pinned version and at the newest release of the same minor series
(asked of npm at run time), and Codex at the pinned version, 0.162.1 and the newest
(tests/support/agent_clis.CODEX_NEWEST_VERSION). Each version is installed into .harnesses/ the
way `make harnesses` installs the pinned ones (skipped when it is already there), then
tests/integration/harness_cli/test_<harness>_cli.py runs with AGENTIHOOKS_CLAUDE_CODE_VERSION /
AGENTIHOOKS_CODEX_VERSION naming it and AGENTIHOOKS_QUALIFIED_VERSIONS naming it as qualified (as
an operator names a version they qualified), and `agentihooks-restorer qualify` runs against it.
A version is qualified when both pass. The results go to docs/harness-qualification.md and to
standard output; the exit status is 1 when any version failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence

from services.common import qualified_versions
from tests.support import agent_clis

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "harness-qualification.md"
TEST_DIR = pathlib.Path("tests/integration/harness_cli")
# Qualified besides the pinned version (tests/support/agent_clis.CODEX_VERSION); the newest
# Codex lies outside the spec's 0.162 and needs AGENTIHOOKS_QUALIFIED_VERSIONS to resume.
EXTRA_CODEX_VERSIONS = ("0.162.1", agent_clis.CODEX_NEWEST_VERSION)

VERSION_RE = re.compile(r"^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?$")
# The pytest summary, e.g. `7 passed in 40.2s` or `== 1 failed, 6 passed in 3.10s ==`.
SUMMARY_RE = re.compile(r"^=*\s*(.*\bin \d+(?:\.\d+)?s\b.*?)\s*=*$")

NPM_INSTALL = ("npm", "install", "--no-audit", "--no-fund", "--no-save", "--loglevel=error")


@dataclasses.dataclass(frozen=True)
class Harness:
    """One agent CLI: how it is installed, found and tested."""

    key: str  # the .harnesses/<key>-<version> folder name, and the harness's setting name
    label: str
    package: str
    executable: str
    version_env: str
    test_module: pathlib.Path


CLAUDE_CODE = Harness(
    key="claude-code",
    label="Claude Code",
    package="@anthropic-ai/claude-code",
    executable="claude",
    version_env=agent_clis.CLAUDE_CODE_VERSION_ENV,
    test_module=TEST_DIR / "test_claude_code_cli.py",
)
CODEX = Harness(
    key="codex",
    label="Codex",
    package="@openai/codex",
    executable="codex",
    version_env=agent_clis.CODEX_VERSION_ENV,
    test_module=TEST_DIR / "test_codex_cli.py",
)


@dataclasses.dataclass(frozen=True)
class Target:
    """A version to qualify; `version` is None when it could not be resolved (`error` says why)."""

    harness: Harness
    version: str | None
    note: str = ""  # e.g. "pinned", "newest 2.1.x"
    error: str = ""


@dataclasses.dataclass(frozen=True)
class Result:
    target: Target
    qualified: bool | None  # None: not yet run
    tests: str


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("-", 1)[0].split("."))


def newest_in_series(package: str, series: str) -> str:
    """The highest release (no pre-release) of `package` matching `series` (e.g. "2.1"), per npm.

    Raises:
        RuntimeError: npm is missing, fails, or answers with no usable version.
    """
    command = ["npm", "view", f"{package}@{series}", "version", "--json"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"`{' '.join(command)}` could not run: {exc}") from exc
    if done.returncode != 0:
        detail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"`{' '.join(command)}` exited {done.returncode}: {detail[0]}")
    try:
        answer = json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        raise RuntimeError(f"`{' '.join(command)}` printed no JSON: {done.stdout[:200]!r}") from exc
    versions = [answer] if isinstance(answer, str) else answer
    releases = [v for v in versions if isinstance(v, str) and VERSION_RE.match(v) and "-" not in v]
    if not releases:
        raise RuntimeError(f"`{' '.join(command)}` named no {series}.x release: {answer!r}")
    return max(releases, key=version_key)


def default_claude_code_targets() -> list[Target]:
    pinned = agent_clis.CLAUDE_CODE_VERSION
    series = ".".join(pinned.split(".")[:2])
    note = f"newest {series}.x"
    targets = [Target(CLAUDE_CODE, pinned, "pinned")]
    try:
        newest = newest_in_series(CLAUDE_CODE.package, series)
    except RuntimeError as exc:
        print(f"error: cannot resolve the newest Claude Code {series}.x: {exc}", file=sys.stderr)
        return [*targets, Target(CLAUDE_CODE, None, note, f"npm could not answer: {exc}")]
    if newest != pinned:
        targets.append(Target(CLAUDE_CODE, newest, note))
    return targets


def default_codex_targets() -> list[Target]:
    pinned = agent_clis.CODEX_VERSION
    extra = [v for v in EXTRA_CODEX_VERSIONS if v != pinned]
    return [Target(CODEX, pinned, "pinned"), *(Target(CODEX, v, codex_note(v)) for v in extra)]


def codex_note(version: str) -> str:
    """What the results table says of a Codex version besides the pinned one."""
    if version == agent_clis.CODEX_NEWEST_VERSION:
        return f"newest; resumes natively where {qualified_versions.VARIABLE} names it"
    return ""


def given_targets(harness: Harness, versions: Sequence[str], pinned: str) -> list[Target]:
    return [Target(harness, v, "pinned" if v == pinned else "") for v in versions]


def version_list(text: str) -> list[str]:
    """argparse type: `V[,V…]`; an empty string means none."""
    versions = [v.strip() for v in text.split(",") if v.strip()]
    for v in versions:
        if not VERSION_RE.match(v):
            raise argparse.ArgumentTypeError(f"not a version number: {v!r} (e.g. 2.1.112)")
    return list(dict.fromkeys(versions))


def harness_dir(harness: Harness, version: str) -> pathlib.Path:
    return ROOT / ".harnesses" / f"{harness.key}-{version}"


def install(harness: Harness, version: str) -> None:
    """Install `package@version` into .harnesses/ as `make harnesses` does, unless it is there.

    npm writes into the sibling `<dir>.partial`, renamed into place only after a complete
    install, so an interrupted install is never taken for an installed one.

    Raises:
        RuntimeError: the install failed.
    """
    target = harness_dir(harness, version)
    if (target / "node_modules" / ".bin" / harness.executable).exists():
        print(f"{harness.package}@{version}: installed in {target.relative_to(ROOT)}", flush=True)
        return
    if shutil.which("npm") is None:
        raise RuntimeError("npm is not on PATH: run `make setup`")
    partial = target.with_name(target.name + ".partial")
    print(f"installing {harness.package}@{version} into {target.relative_to(ROOT)}", flush=True)
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    spec = f"{harness.package}@{version}"
    done = subprocess.run([*NPM_INSTALL, "--prefix", str(partial), spec], check=False)
    if done.returncode != 0:
        raise RuntimeError(f"npm install {spec} exited {done.returncode}")
    if not (partial / "node_modules" / ".bin" / harness.executable).exists():
        raise RuntimeError(
            f"npm install {spec} installed no node_modules/.bin/{harness.executable}"
        )
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)


def summary_line(output: str) -> str:
    """The last pytest summary line in `output`, or "" when there is none."""
    for line in reversed(output.splitlines()):
        found = SUMMARY_RE.match(line.strip())
        if found and re.search(r"\b(passed|failed|errors?|skipped|no tests ran)\b", line):
            return found.group(1)
    return ""


def python_for_tests() -> str:
    venv_python = ROOT / ".venv" / "bin" / "python"
    return str(venv_python) if venv_python.exists() else sys.executable


def qualify(target: Target) -> Result:
    harness, version = target.harness, target.version
    if version is None:
        return Result(target, False, target.error)
    module = ROOT / harness.test_module
    if not module.is_file():
        return Result(target, False, f"test module {harness.test_module} does not exist")
    try:
        install(harness, version)
    except (RuntimeError, OSError) as exc:
        return Result(target, False, f"install failed: {exc}")
    command = [
        python_for_tests(),
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        str(harness.test_module),
    ]
    env = {
        **os.environ,
        harness.version_env: version,
        qualified_versions.VARIABLE: f"{harness.key}={version}",
    }
    print(f"== {harness.label} {version}: {' '.join(command[1:])}", flush=True)
    output: list[str] = []
    with subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            output.append(line)
        code = proc.wait()
    summary = summary_line("".join(output)) or "no pytest summary"
    tests = f"{summary} (exit {code})" if code != 0 else summary
    # Every test must really run: a skipped test is not a qualification.
    qualified = code == 0 and "skipped" not in summary
    passed, verdict = run_qualify_command(harness, version)
    return Result(target, qualified and passed, f"{tests}; `qualify`: {verdict}")


def run_qualify_command(harness: Harness, version: str) -> tuple[bool, str]:
    """`agentihooks-restorer qualify` against the installed version: (qualified, verdict)."""
    executable = harness_dir(harness, version) / "node_modules" / ".bin" / harness.executable
    command = [
        python_for_tests(),
        "-m",
        "services.restorer.main",
        "qualify",
        "--harness",
        harness.key,
        "--cli",
        str(executable),
        "--json",
    ]
    print(f"== {harness.label} {version}: agentihooks-restorer qualify", flush=True)
    try:
        done = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False
        )
    except subprocess.TimeoutExpired:
        return False, "timed out"
    print(done.stdout, end="", flush=True)
    try:
        verdict = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return False, f"exit {done.returncode}, no verdict"
    if done.returncode == 0 and verdict.get("qualified") is True:
        return True, "qualified"
    return False, f"not qualified ({verdict.get('step')}: {verdict.get('reason')})"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(results: Sequence[Result]) -> str:
    rows = ["| harness | version | result | tests |", "|---|---|---|---|"]
    for r in results:
        version = r.target.version or "?"
        if r.target.note:
            version += f" ({r.target.note})"
        if r.qualified is None:
            result = "not yet run"
        else:
            result = "qualified" if r.qualified else "**not qualified**"
        rows.append(
            f"| {r.target.harness.label} | {cell(version)} | {result} | {cell(r.tests) or '—'} |"
        )
    return "\n".join(rows) + "\n"


INTRO = """\
# Harness qualification

A harness version is **qualified** when the real CLI published to npm at that version, run
against a loopback mock of the model API (no network, no account), passes the native-resume
suite in `tests/integration/harness_cli/`:

- **capture**: the session files the CLI wrote are captured;
- **restore** into another home and another working folder: the CLI's resume command exits 0
  and the model receives every earlier turn byte for byte;
- **interactive resume** under tmux;
- **reconstructed continuation**: a new conversation whose opening prompt is the archived
  transcript;
- the **option tables** agentihooks keeps for the CLI match the real `--help`;

and when `agentihooks-restorer qualify`, the command an operator runs against the CLI in their
worker image (see the operator guide, "Qualifying a new CLI version"), prints `qualified` for it.

Native resume is qualified by default for the spec's Claude Code 2.1 and Codex 0.162. A version
outside them that passes here resumes natively only where `AGENTIHOOKS_QUALIFIED_VERSIONS` names
it (e.g. `codex=0.171.0`); the suite runs each version with the setting naming it.

The pinned versions (`CLAUDE_CODE_VERSION` and `CODEX_VERSION` in the `Makefile`, the same numbers
in `tests/support/agent_clis.py`) are what `make setup` installs into `.harnesses/` and what
`make test` runs.
"""

RERUN = """\
## Re-run

```sh
make qualify        # the pinned versions, the newest Claude Code {series}.x and Codex {codex}
.venv/bin/python -m scripts.qualify --claude-code 2.1.112,2.1.120 --codex 0.162.1
.venv/bin/python -m scripts.qualify --claude-code '' --codex 0.162.0   # Codex only
```

`--claude-code V[,V…]` and `--codex V[,V…]` replace the default versions of that harness (an
empty list skips it). Each version is installed into `.harnesses/<harness>-<version>/` (kept for
the next run), its test module runs with `AGENTIHOOKS_CLAUDE_CODE_VERSION` /
`AGENTIHOOKS_CODEX_VERSION` set to it and `AGENTIHOOKS_QUALIFIED_VERSIONS` naming it, then
`agentihooks-restorer qualify --harness <harness> --cli <its executable>` runs. The command
rewrites this file and exits non-zero when any version is not qualified.
"""


def document(results: Sequence[Result], ran: str) -> str:
    series = ".".join(agent_clis.CLAUDE_CODE_VERSION.split(".")[:2])
    codex = ", ".join(dict.fromkeys([agent_clis.CODEX_VERSION, *EXTRA_CODEX_VERSIONS]))
    return (
        f"{INTRO}\n## Results\n\n{ran}\n\n{table(results)}\n"
        f"{RERUN.format(series=series, codex=codex)}"
    )


def node_version() -> str:
    try:
        done = subprocess.run(
            ["node", "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip() or "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.qualify",
        description="Run the real-CLI test suite against several versions of Claude Code and "
        f"Codex and write {DOC.relative_to(ROOT)}.",
    )
    parser.add_argument(
        "--claude-code",
        type=version_list,
        metavar="V[,V...]",
        help=f"Claude Code versions (default: {agent_clis.CLAUDE_CODE_VERSION} and the newest "
        "release of its minor series, asked of npm)",
    )
    parser.add_argument(
        "--codex",
        type=version_list,
        metavar="V[,V...]",
        help="Codex versions (default: "
        + ", ".join(dict.fromkeys([agent_clis.CODEX_VERSION, *EXTRA_CODEX_VERSIONS]))
        + ")",
    )
    args = parser.parse_args(argv)

    targets: list[Target] = []
    if args.claude_code is None:
        targets += default_claude_code_targets()
    else:
        targets += given_targets(CLAUDE_CODE, args.claude_code, agent_clis.CLAUDE_CODE_VERSION)
    if args.codex is None:
        targets += default_codex_targets()
    else:
        targets += given_targets(CODEX, args.codex, agent_clis.CODEX_VERSION)
    if not targets:
        parser.error("no versions to qualify")

    started = datetime.datetime.now(datetime.UTC)
    results = [qualify(t) for t in targets]
    ran = f"Run on {started:%Y-%m-%d} (started {started:%H:%M} UTC) with Node.js {node_version()}."
    DOC.write_text(document(results, ran), encoding="utf-8")

    print()
    print(table(results), end="")
    print(f"\nwritten to {DOC.relative_to(ROOT)}")
    return 0 if all(r.qualified for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
