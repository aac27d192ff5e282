"""Qualifying the newest Codex (0.171.0) as an operator does, then resuming with it.

Issue 24: "The qualification command passing for Codex 0.171.0 in a test that then restores
natively with it once the setting names it, and refusing with `unqualified_version` without it."
Spec: "Native resume is qualified for Claude Code 2.1 and Codex 0.162"; `unqualified_version`:
"The replacement's harness version is not qualified for native resume"; "Native state lands
before source state, so a version or identity refusal leaves the work tree untouched."

Everything is real: the published Codex 0.171.0 under .harnesses/ (`make harnesses` installs
it; a missing one fails the test), the `agentihooks-restorer` process, the loopback model mock,
the restorer's own Capturer and restore.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from services.common import directives, settings
from services.restorer import capturing, launching, restores, restoring
from services.restorer.harness import base, codex
from tests.integration.harness_cli import cases
from tests.integration.harness_cli import cli_support as cs
from tests.integration.restorer import sidecar_support as kit
from tests.support import agent_clis, model_api

pytestmark = pytest.mark.slow

VERSION = agent_clis.CODEX_NEWEST_VERSION
QUALIFY_TIMEOUT_S = 900.0
RESTORER = pathlib.Path(sys.executable).parent / "agentihooks-restorer"
SETTING = {"AGENTIHOOKS_QUALIFIED_VERSIONS": f"codex={VERSION}"}


@dataclasses.dataclass
class OperatorCli(cs.Cli):
    """The real CLI, with the restorer's harness environment as the operator set it (the
    setting or not), whatever this test process's own environment holds."""

    setting: dict[str, str] = dataclasses.field(default_factory=dict)

    def harness_env(self, config_dir: pathlib.Path | None) -> dict[str, str]:
        found = dict(self.setting)
        if config_dir is not None:
            found[self.config_variable] = str(config_dir)
        return found


@pytest.fixture
def cli() -> Iterator[OperatorCli]:
    assert VERSION != agent_clis.CODEX_VERSION and not codex.Codex({}).qualifies(VERSION)
    with model_api.ModelApi() as api:
        yield OperatorCli(codex.NAME, agent_clis.codex_executable(VERSION), api)


def qualify(*args: str) -> subprocess.CompletedProcess[str]:
    """`agentihooks-restorer qualify …` as its own process, as an operator's CI runs it."""
    env = {k: v for k, v in os.environ.items() if k != "AGENTIHOOKS_QUALIFIED_VERSIONS"}
    return subprocess.run(
        [str(RESTORER), "qualify", *args],
        cwd=agent_clis.REPO_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=QUALIFY_TIMEOUT_S,
        check=False,
    )


def test_the_qualify_command_passes_for_codex_0_171_0() -> None:
    """The command runs capture, restore into another home and folder, native resume and the
    history comparison against the real CLI, and prints a verdict naming the setting; it
    prints nothing of the conversation and no key."""
    done = qualify("--harness", "codex", "--cli", agent_clis.codex_executable(VERSION))
    assert done.returncode == 0, (done.stdout, done.stderr[-2000:])
    assert done.stdout == (
        f"qualified: codex {VERSION} resumes a restored session natively; to use it, set"
        f" AGENTIHOOKS_QUALIFIED_VERSIONS=codex={VERSION} on the worker and its sidecar\n"
    )
    for word in ("failing test", "changelog", "Understood", "sk-"):
        assert word not in done.stdout + done.stderr


def qualified_setting() -> dict[str, str]:
    """`agentihooks-restorer qualify --json` against Codex 0.171.0, then the setting its
    verdict names, read by the restorer's own settings loader as the sidecar reads it."""
    done = qualify("--harness", "codex", "--cli", agent_clis.codex_executable(VERSION), "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    verdict = json.loads(done.stdout)
    assert verdict == {
        "harness": "codex",
        "version": VERSION,
        "qualified": True,
        "by_default": False,
        "setting": f"AGENTIHOOKS_QUALIFIED_VERSIONS=codex={VERSION}",
    }
    name, _, value = verdict["setting"].partition("=")
    return dict(settings.load_restorer({name: value}).harness_env)


def test_a_cli_that_cannot_resume_is_not_qualified() -> None:
    """The verdict names the step that failed, and the exit status is 1: Codex run as if it
    were Claude Code cannot hold a conversation the Claude Code adapter finds."""
    done = qualify("--harness", "claude-code", "--cli", agent_clis.codex_executable(VERSION))
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stdout.startswith(f"not qualified: claude-code {VERSION}: session: ")


async def restore_events(
    cli: cs.Cli, seat: cs.Seat, command: tuple[str, ...], directive: directives.Directive
) -> restores.Ready | restores.Refused:
    launch = cs.launch_record(cli, command, directive, scope=kit.REPLACEMENT, url=seat.project.url)
    attempt = restores.Attempt(
        seat.worktree, seat.attempt_dir, seat.home, cli.harness_env(seat.config)
    )
    last: Any = None
    async for event in restoring.restore(launch, attempt, seat.store()):
        last = event
    assert isinstance(last, restores.Ready | restores.Refused)
    return last


async def test_qualified_codex_0_171_0_resumes_natively_once_the_setting_names_it(
    cli: OperatorCli, tmp_path: pathlib.Path
) -> None:
    """The qualify command passes and names the setting. Captured with that setting: a native
    checkpoint. A replacement without it is refused with `unqualified_version` and its
    worktree stays untouched; with it the replacement restores natively, and the resumed Codex
    0.171.0 sends every earlier turn byte for byte."""
    setting = qualified_setting()
    assert setting == {"AGENTIHOOKS_QUALIFIED_VERSIONS": f"codex={VERSION}"}
    seat = cs.make_seat(tmp_path, config_dirs=False)
    history = cs.earlier_turns(cs.start_session(cli, seat))
    command = cli.print_command("the original task")
    cli.setting = dict(setting)
    captured = await cs.capture(cli, seat, command)
    assert captured.continuity == "native" and captured.native_session_id
    directive = cases.directives_native(captured)

    cli.setting = {}
    refused = await restore_events(cli, seat, command, directive)
    assert refused == restores.Refused("unqualified_version")
    assert list(seat.worktree.iterdir()) == []

    cli.setting = dict(setting)
    cli.provide(seat.home, seat.config)
    ready = await restore_events(cli, seat, command, directive)
    assert isinstance(ready, restores.Ready) and ready.recovery is directives.Continuity.NATIVE
    before = len(cli.api.calls)
    done = cli.run(ready.command, seat.worktree, cli.env(seat.home, seat.config))
    assert done.returncode == 0, done.stderr[-2000:]
    resumed = cs.conversation_calls_since(cli.api, before)
    assert resumed, "the resumed CLI sent the mock nothing"
    cs.assert_history_sent(resumed[0], history, base.DEFAULT_CONTINUATION_PROMPT)


async def test_a_capture_under_an_unqualified_version_warns_once(
    cli: OperatorCli, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Without the setting every capture under Codex 0.171.0 is context only, and the
    capturer says so once, naming the harness and the version, not at every capture."""
    seat = cs.make_seat(tmp_path, config_dirs=False)
    cs.start_session(cli, seat)
    command = cli.print_command("the original task")
    fenced = cs.launch_record(cli, command, directives.FRESH, scope=kit.SCOPE, url=seat.project.url)
    attempt = restores.Attempt(
        seat.project.worktree, seat.tmp / "fenced", seat.fenced_home, cli.harness_env(None)
    )
    capturer = capturing.Capturer(fenced, attempt, seat.storage())
    with caplog.at_level(logging.INFO, logger="services.restorer"):
        first = await capturer.capture()
        again = await capturer.capture()
        done = cli.run(
            cli.headless_resume(str(first.native_session_id), "One more turn."),
            seat.project.worktree,
            cli.env(seat.fenced_home, None),
        )
        assert done.returncode == 0, done.stderr[-2000:]
        third = await capturer.capture()
    assert first.continuity == "context_only" and first.native_session_id
    assert not again.written and third.written and third.continuity == "context_only"
    warnings = [
        getattr(r, "fields", {})
        for r in caplog.records
        if getattr(r, "fields", {}).get("event") == "harness_version_unqualified"
    ]
    assert len(warnings) == 1, warnings
    assert warnings[0]["harness"] == "codex" and warnings[0]["version"] == VERSION
    assert [
        r.levelno for r in caplog.records if r.getMessage() == "harness_version_unqualified"
    ] == [logging.WARNING]


def restorer(
    command: str, worktree: pathlib.Path, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """`agentihooks-restorer capture|restore --worktree …` as its own process; its result."""
    done = subprocess.run(
        [str(RESTORER), command, "--worktree", str(worktree)],
        cwd=agent_clis.REPO_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=QUALIFY_TIMEOUT_S,
        check=False,
    )
    return done, json.loads(done.stdout)


def events(stderr: str, name: str) -> list[dict[str, Any]]:
    found = []
    for line in stderr.splitlines():
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict) and value.get("event") == name:
                found.append(value)
    return found


def test_the_restorer_processes_read_the_setting_for_capture_and_restore(
    cli: OperatorCli, tmp_path: pathlib.Path
) -> None:
    """The sidecar's own commands, each a process whose environment holds the setting or not:
    `capture` under Codex 0.171.0 is context only with one warning naming the harness and the
    version, and native with the setting; `restore` of that native checkpoint is refused with
    `unqualified_version` without the setting and ready to resume natively with it."""
    seat = cs.make_seat(tmp_path, config_dirs=False)
    history = cs.earlier_turns(cs.start_session(cli, seat))
    command = cli.print_command("the original task")
    root = seat.checkpoints

    def environment(
        launch: launching.LaunchRecord, home: pathlib.Path, **extra: str
    ) -> dict[str, str]:
        record = tmp_path / f"launch-{launch.scope.execution_id}.json"
        record.write_text(json.dumps(launching.to_json(launch)))
        return {
            "PATH": f"{RESTORER.parent}{os.pathsep}{agent_clis.harness_path_env(cli.executable)}",
            "HOME": str(home),
            "AGENTIHOOKS_LAUNCH_RECORD": str(record),
            "AGENTIHOOKS_CHECKPOINT_ROOT": str(root),
            "AGENTIHOOKS_ATTEMPT_DIR": str(home.parent),
            "AGENTIHOOKS_HARNESS_HOME": str(home),
            **extra,
        }

    fenced = cs.launch_record(cli, command, directives.FRESH, scope=kit.SCOPE, url=seat.project.url)
    unqualified, out = restorer(
        "capture", seat.project.worktree, environment(fenced, seat.fenced_home)
    )
    assert unqualified.returncode == 0, unqualified.stderr[-2000:]
    assert out["continuity"] == "context_only"
    [warning] = events(unqualified.stderr, "harness_version_unqualified")
    assert warning["harness"] == "codex" and warning["version"] == VERSION
    assert warning["level"] == "warning"

    qualified, out = restorer(
        "capture", seat.project.worktree, environment(fenced, seat.fenced_home, **SETTING)
    )
    assert qualified.returncode == 0, qualified.stderr[-2000:]
    assert out["continuity"] == "native" and out["written"]
    assert not events(qualified.stderr, "harness_version_unqualified")
    directive = directives.Directive(
        out["checkpoint_id"],
        directives.Continuity.NATIVE,
        out["native_session_id"],
        out["watermark"],
    )
    replacement = cs.launch_record(
        cli, command, directive, scope=kit.REPLACEMENT, url=seat.project.url
    )

    refused, out = restorer("restore", seat.worktree, environment(replacement, seat.home))
    assert refused.returncode == 3 and out == {"state": "refused", "reason": "unqualified_version"}

    cli.provide(seat.home, seat.config)
    ready, out = restorer("restore", seat.worktree, environment(replacement, seat.home, **SETTING))
    assert ready.returncode == 0, ready.stderr[-2000:]
    assert out["state"] == "ready" and out["recovery"] == "native"
    before = len(cli.api.calls)
    done = cli.run(out["command"], seat.worktree, cli.env(seat.home, seat.config))
    assert done.returncode == 0, done.stderr[-2000:]
    resumed = cs.conversation_calls_since(cli.api, before)
    assert resumed, "the resumed CLI sent the mock nothing"
    cs.assert_history_sent(resumed[0], history, base.DEFAULT_CONTINUATION_PROMPT)
