"""Drive the real agent CLIs through the restorer's own capture and restore.

A `Cli` runs one real harness (`claude` or `codex`, the pinned npm package under .harnesses/)
against the loopback model mock, in a given home and folder. `capture_then_restore` is the life
of a seat: the fenced attempt's real session in folder A is captured by the restorer's
`Capturer` into a local checkpoint folder, then `restoring.restore` delivers a directive into a
fresh home and folder B, as two Pods would; the returned `Ready` holds exactly the command the
worker entry point runs (`entry.harness_environment` gives the environment it runs with).

Homes, config folders (`CLAUDE_CONFIG_DIR`, `CODEX_HOME`) and worktree paths all differ between
the fenced attempt and its replacement.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import shlex
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from services.common import directives, settings
from services.common.checkpoints import backends, storing
from services.restorer import captures, capturing, entry, launching, model_mock, restores, restoring
from services.restorer.harness import claude_code, codex
from tests.integration.restorer import sidecar_support as kit
from tests.support import agent_clis, binaries, git_repos, model_api

CLAUDE_API_KEY = "sk-ant-dummy-key-for-the-loopback-mock"
RUN_TIMEOUT_S = 600.0
"""A CLI turn takes about two seconds here; the bound is for a machine loaded many times over."""
SCREEN_TIMEOUT_S = 180.0
"""How long an interactive CLI may take to send its first request: one that stops at a question
never sends one, so this bound is what such a failure costs."""

C = directives.Continuity

# Raw U+2028/U+2029 and a raw CRLF: a harness transcript must carry them through unchanged.
FIRST_PROMPT = "Fix the failing test.\u2028Keep\u2029the API.\r\nThen report."
SECOND_PROMPT = "Also update the changelog."


def turns(call: model_api.Call) -> list[tuple[str, str]]:
    """The conversation a request carries: (role, text) of every text part, in order (the
    product's reading, `services.restorer.model_mock.turns`)."""
    return model_api.turns(call)


def conversation_calls(api: model_api.ModelApi) -> list[model_api.Call]:
    """The requests that carry a conversation (not token counts or side requests)."""
    return conversation_calls_since(api, 0)


def conversation_calls_since(api: model_api.ModelApi, start: int) -> list[model_api.Call]:
    """The conversation requests received after the first `start` requests."""
    return api.conversation_calls_since(start)


@dataclasses.dataclass
class Cli:
    """One real harness CLI, its home and its environment."""

    harness: str
    executable: str
    api: model_api.ModelApi
    config_dir: pathlib.Path | None = None

    @property
    def config_variable(self) -> str:
        return (
            claude_code.CONFIG_DIR_VARIABLE
            if self.harness == claude_code.NAME
            else codex.HOME_VARIABLE
        )

    def env(self, home: pathlib.Path, config_dir: pathlib.Path | None) -> dict[str, str]:
        """The environment of a worker whose harness home is `home`."""
        env = {
            "PATH": agent_clis.harness_path_env(self.executable),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "TERM": "xterm-256color",
        }
        if self.harness == claude_code.NAME:
            env.update(
                {
                    "ANTHROPIC_BASE_URL": self.api.base_url,
                    "ANTHROPIC_API_KEY": CLAUDE_API_KEY,
                    "DISABLE_AUTOUPDATER": "1",
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                }
            )
        else:
            env["MOCK_MODEL_API_KEY"] = "dummy"
        if config_dir is not None:
            env[self.config_variable] = str(config_dir)
        return env

    def harness_env(self, config_dir: pathlib.Path | None) -> dict[str, str]:
        """The worker's harness variables as the restorer reads them (settings.load_restorer),
        with the qualified versions `make qualify` names for the version under test."""
        found = agent_clis.qualified_versions_env()
        if config_dir is not None:
            found[self.config_variable] = str(config_dir)
        return found

    def provide(self, home: pathlib.Path, config_dir: pathlib.Path | None) -> None:
        """The operator's provider configuration, as a worker image or ConfigMap supplies it.

        Codex: a `model_providers` entry on loopback with `wire_api = "responses"`. Claude Code:
        the API key approved once, as an operator pre-approves it (an interactive Claude Code
        otherwise asks whether to use a key it finds in its environment; Claude Code records
        an approval as the key's last 20 characters).
        """
        if self.harness == claude_code.NAME:
            folder = config_dir or home
            folder.mkdir(parents=True, exist_ok=True)
            approved = {"approved": [CLAUDE_API_KEY[-20:]], "rejected": []}
            (folder / claude_code.CONFIG_FILE).write_text(
                json.dumps({"customApiKeyResponses": approved})
            )
            return
        folder = config_dir or home / ".codex"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.toml").write_text(
            model_mock.codex_provider(self.api.base_url, "MOCK_MODEL_API_KEY")
        )

    def print_command(self, prompt: str) -> tuple[str, ...]:
        """The headless form: `claude -p PROMPT`, `codex exec PROMPT`."""
        if self.harness == claude_code.NAME:
            return (self.executable, "-p", prompt)
        return (self.executable, "exec", "--skip-git-repo-check", prompt)

    def interactive_command(self, prompt: str) -> tuple[str, ...]:
        """The interactive form, with an opening prompt: `claude PROMPT`, `codex PROMPT`."""
        return (self.executable, prompt)

    def headless_resume(self, session_id: str, prompt: str | None) -> list[str]:
        """The CLI's own headless resume, with or without a prompt."""
        if self.harness == claude_code.NAME:
            return [self.executable, "--resume", session_id, "-p", *([prompt] if prompt else [])]
        tail = [prompt] if prompt else []
        return [self.executable, "exec", "--skip-git-repo-check", "resume", session_id, *tail]

    def run(
        self,
        command: Sequence[str],
        cwd: pathlib.Path,
        env: dict[str, str],
        *,
        stdin_path: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command as the worker entry point would: its environment without the
        sidecar's credential, stdin from `stdin_path` (else nothing)."""
        stdin = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL  # noqa: SIM115
        try:
            return subprocess.run(
                list(command),
                cwd=cwd,
                env=entry.harness_environment(env),
                stdin=stdin,
                capture_output=True,
                text=True,
                timeout=RUN_TIMEOUT_S,
                check=False,
            )
        finally:
            if stdin is not subprocess.DEVNULL:
                stdin.close()


@dataclasses.dataclass
class Seat:
    """A fenced attempt's folders (A) and its replacement's (B), and the checkpoint folder."""

    tmp: pathlib.Path
    project: git_repos.Project
    fenced_home: pathlib.Path
    fenced_config: pathlib.Path | None
    home: pathlib.Path
    config: pathlib.Path | None
    attempt_dir: pathlib.Path
    worktree: pathlib.Path

    @property
    def checkpoints(self) -> pathlib.Path:
        return self.tmp / "checkpoints"

    def storage(self) -> settings.StorageSettings:
        return settings.load_storage({"AGENTIHOOKS_CHECKPOINT_ROOT": str(self.checkpoints)})

    def store(self) -> storing.ArtifactStore:
        backend = backends.open_backend(str(self.checkpoints), None, None)
        assert backend is not None
        return backend.scoped(storing.StoreScope("example", "t-eng-2", 1))


def make_seat(tmp: pathlib.Path, *, config_dirs: bool) -> Seat:
    """Folder A holds a real git project; B is an empty worktree at another, deeper path."""
    project = git_repos.project(tmp / "fenced")
    fenced_home = tmp / "fenced" / "home"
    fenced_home.mkdir(parents=True)
    replacement = tmp / "replacement" / "pod-b"
    home = replacement / "home"
    home.mkdir(parents=True)
    worktree = replacement / "work" / "app"
    worktree.mkdir(parents=True)
    return Seat(
        tmp=tmp,
        project=project,
        fenced_home=fenced_home,
        fenced_config=tmp / "fenced" / "harness-config" if config_dirs else None,
        home=home,
        config=replacement / "elsewhere" / "harness-config" if config_dirs else None,
        attempt_dir=replacement,
        worktree=worktree,
    )


def launch_record(
    cli: Cli,
    command: Sequence[str],
    directive: directives.Directive,
    *,
    scope: launching.Scope,
    url: str,
    continuation_prompt: str = "",
) -> launching.LaunchRecord:
    return launching.LaunchRecord(
        scope=scope,
        directive=directive,
        projects=(launching.Project("app", url),),
        worker_image="registry.local/agent-worker:1.4.2",
        harness=cli.harness,
        restores_from_generation=(
            0 if directive.recovery is C.FRESH else kit.SCOPE.execution_generation
        ),
        restore_grant="",
        capture_grant="",
        command=tuple(command),
        checkpoint_remote=False,
        store_addr=None,
        continuation_prompt=continuation_prompt,
    )


async def capture(cli: Cli, seat: Seat, command: Sequence[str]) -> captures.Captured:
    """The fenced attempt's checkpoint, taken by the restorer's real Capturer; then its Pod is
    lost: its worktree, home and config folder are gone, as on another machine, so nothing of
    them can help the replacement."""
    fenced = launch_record(cli, command, directives.FRESH, scope=kit.SCOPE, url=seat.project.url)
    attempt = restores.Attempt(
        seat.project.worktree,
        seat.tmp / "fenced",
        seat.fenced_home,
        cli.harness_env(seat.fenced_config),
    )
    captured = await capturing.Capturer(fenced, attempt, seat.storage()).capture()
    for folder in (seat.project.worktree, seat.fenced_home, seat.fenced_config):
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    return captured


async def restore(
    cli: Cli,
    seat: Seat,
    command: Sequence[str],
    directive: directives.Directive,
    *,
    continuation_prompt: str = "",
) -> restores.Ready:
    """The replacement's restore into home and folder B; fails the test on a refusal."""
    launch = launch_record(
        cli,
        command,
        directive,
        scope=kit.REPLACEMENT,
        url=seat.project.url,
        continuation_prompt=continuation_prompt,
    )
    attempt = restores.Attempt(
        seat.worktree, seat.attempt_dir, seat.home, cli.harness_env(seat.config)
    )
    last: Any = None
    async for event in restoring.restore(launch, attempt, seat.store()):
        last = event
    assert isinstance(last, restores.Ready), f"the restore was refused: {last}"
    return last


def start_session(cli: Cli, seat: Seat) -> list[model_api.Call]:
    """The fenced attempt's real conversation in folder A: two turns, the first prompt holding
    raw U+2028/U+2029 and CRLF. Returns the conversation requests the mock received."""
    env = cli.env(seat.fenced_home, seat.fenced_config)
    cli.provide(seat.fenced_home, seat.fenced_config)
    first = cli.run(cli.print_command(FIRST_PROMPT), seat.project.worktree, env)
    assert first.returncode == 0, first.stderr[-2000:]
    adapter = cli_adapter(cli, seat.fenced_config)
    session_id = adapter.native_session_id(seat.fenced_home, seat.project.worktree)
    assert session_id is not None, "the real CLI wrote no session where the adapter looks"
    second = cli.run(cli.headless_resume(session_id, SECOND_PROMPT), seat.project.worktree, env)
    assert second.returncode == 0, second.stderr[-2000:]
    calls = conversation_calls(cli.api)
    assert calls, "the CLI sent the mock no conversation"
    return calls


def cli_adapter(cli: Cli, config_dir: pathlib.Path | None) -> Any:
    env = cli.harness_env(config_dir)
    if cli.harness == claude_code.NAME:
        return claude_code.ClaudeCode(env)
    return codex.Codex(env)


def earlier_turns(calls: list[model_api.Call]) -> list[tuple[str, str]]:
    """Every turn of the conversation so far: the last request's, then the mock's reply."""
    return [*turns(calls[-1]), ("assistant", model_api.REPLY)]


def assert_history_sent(
    resumed: model_api.Call, history: list[tuple[str, str]], prompt: str
) -> None:
    """The resumed request carries every earlier turn byte for byte, in order, then `prompt` as
    a user text of the new turn (newer Claude Code builds add a reminder block beside it)."""
    sent = turns(resumed)
    assert sent[: len(history)] == history, "the resumed request does not start with the history"
    assert ("user", FIRST_PROMPT) in history and ("user", SECOND_PROMPT) in history
    assert ("user", prompt) in sent[len(history) :], "the continuation prompt was not sent"


def run_in_tmux(
    cli: Cli,
    command: Sequence[str],
    cwd: pathlib.Path,
    env: dict[str, str],
    *,
    until: Callable[[], bool],
) -> str:
    """Run an interactive command in a detached tmux session (a real terminal) until `until`
    holds; returns the screen as it was then. The session is always killed."""
    tmux = binaries.require("tmux")
    name = f"agentihooks-{uuid.uuid4().hex[:12]}"
    socket = ["-L", name]
    script = cwd.parent / f"{name}.sh"
    harness_env = entry.harness_environment(env)
    lines = ["#!/bin/sh", f"cd {shlex.quote(str(cwd))} || exit 97"]
    lines.append(
        "exec env -i "
        + " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(harness_env.items()))
        + " "
        + " ".join(shlex.quote(word) for word in command)
    )
    script.write_text("\n".join(lines) + "\n")
    script.chmod(0o700)
    subprocess.run(
        [tmux, *socket, "new-session", "-d", "-s", name, "-x", "200", "-y", "50", str(script)],
        check=True,
        timeout=RUN_TIMEOUT_S,
    )

    def screen() -> str:
        shown = subprocess.run(
            [tmux, *socket, "capture-pane", "-p", "-t", name],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
        return shown.stdout

    try:
        last = ""
        deadline = time.monotonic() + SCREEN_TIMEOUT_S
        while not until():
            last = screen() or last
            if time.monotonic() > deadline:
                raise AssertionError(f"the interactive CLI sent nothing; its screen:\n{last}")
            time.sleep(0.3)
        return screen() or last
    finally:
        subprocess.run([tmux, *socket, "kill-server"], capture_output=True, check=False)
        # An interactive Codex starts a shared app-server daemon from its home that outlives
        # the terminal (a Pod's end takes it along); end it with the test.
        home = pathlib.Path(env["HOME"])
        for _ in range(3):
            _kill_under(home)
            time.sleep(0.5)


def _kill_under(folder: pathlib.Path) -> None:
    """SIGKILL every process whose executable or arguments name a path under `folder`."""
    marker = str(folder)
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(marker.encode() in word for word in argv):
            with contextlib.suppress(OSError):
                os.kill(int(proc.name), signal.SIGKILL)
