"""`agentihooks-restorer qualify`: does the agent CLI installed here resume a restored session?

What an operator runs in their worker image's CI before naming a CLI version in
`AGENTIHOOKS_QUALIFIED_VERSIONS`. It runs the real CLI (found on PATH, or `--cli`) against the
loopback model mock shipped with the restorer (`model_mock`, on 127.0.0.1: no network, no
account, no key), and goes through what a fenced attempt and its replacement go through:

1. **version**: `CLI --version`;
2. **session**: a two-turn headless conversation in home and folder A, its first prompt holding
   a raw U+2028, U+2029 and CRLF (a resume must carry them through unchanged);
3. **capture**: the restorer's own `Capturer` into a local checkpoint folder, with this exact
   version named as qualified for the run; the checkpoint must be native; then A's home and
   folder are removed, as when a Pod is lost;
4. **restore**: `restoring.restore` of a native directive into home and folder B, at another
   path;
5. **resume**: the exact command the worker entry point would run, which must exit 0;
6. **history**: the first request the resumed CLI sends must start with every earlier turn, byte
   for byte, then carry the continuation prompt.

The verdict (`qualification.Verdict`) is one line (or one JSON object with `--json`):
qualified or not, the step and the reason. Nothing of the conversation, the CLI's output or
any credential is printed. Exit 0: qualified; 1: not qualified; 2: usage (an unknown harness,
no such CLI).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import pathlib
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence

from services.common import directives, logs, qualified_versions, settings
from services.restorer import (
    captures,
    capturing,
    entry,
    fetching,
    harness,
    launching,
    model_mock,
    qualification,
    restores,
    restoring,
)
from services.restorer.harness import base, claude_code, codex

EXIT_QUALIFIED = 0
EXIT_NOT_QUALIFIED = 1
EXIT_USAGE = 2
DEFAULT_TIMEOUT_S = 300.0
"""How long one CLI turn may take (about two seconds on an idle machine)."""

FIRST_PROMPT = "Fix the failing test.\u2028Keep\u2029the API.\r\nThen report."
SECOND_PROMPT = "Also update the changelog."
ORIGINAL_TASK = "the original task"
DUMMY_KEY = "sk-qualify-loopback-mock-key-000000000000"
"""Handed to the CLI so it talks to the mock; it is no credential of anyone's."""
KEY_VARIABLE = "QUALIFY_MODEL_API_KEY"
_FENCED = launching.Scope("qualify", "seat", "t-qualify", 1, "e-qualify-1", 1)
_REPLACEMENT = launching.Scope("qualify", "seat", "t-qualify", 1, "e-qualify-2", 2)


class _Failed(Exception):
    def __init__(self, step: str, reason: str) -> None:
        super().__init__(reason)
        self.step = step
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class _Pod:
    """One side's harness home and worktree (A: the fenced attempt, B: its replacement)."""

    home: pathlib.Path
    worktree: pathlib.Path

    @classmethod
    def made(cls, root: pathlib.Path) -> _Pod:
        pod = cls(root / "home", root / "work" / "app")
        pod.home.mkdir(parents=True)
        pod.worktree.mkdir(parents=True)
        return pod


class _Cli:
    """The real CLI under test, run against the mock with nothing of this process's
    environment but PATH (no key, proxy or config of the operator's reaches it)."""

    def __init__(
        self, adapter: base.Harness, executable: str, api: model_mock.ModelApi, timeout_s: float
    ) -> None:
        self.adapter = adapter
        self.executable = executable
        self.api = api
        self.timeout_s = timeout_s

    def env(self, home: pathlib.Path) -> dict[str, str]:
        env = {"PATH": _path(self.executable), "HOME": str(home), "LANG": "C.UTF-8"}
        if self.adapter.name == claude_code.NAME:
            env.update(
                ANTHROPIC_BASE_URL=self.api.base_url,
                ANTHROPIC_API_KEY=DUMMY_KEY,
                DISABLE_AUTOUPDATER="1",
                CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            )
        else:
            env[KEY_VARIABLE] = DUMMY_KEY
        return env

    def provide(self, home: pathlib.Path) -> None:
        """The provider configuration an image supplies: Codex's `model_providers` entry for
        the mock (Claude Code reads `ANTHROPIC_BASE_URL`)."""
        if self.adapter.name != codex.NAME:
            return
        folder = home / ".codex"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.toml").write_text(
            model_mock.codex_provider(self.api.base_url, KEY_VARIABLE), encoding="utf-8"
        )

    def print_command(self, prompt: str) -> tuple[str, ...]:
        """The headless form: `claude -p PROMPT`, `codex exec --skip-git-repo-check PROMPT`."""
        if self.adapter.name == claude_code.NAME:
            return (self.executable, "-p", prompt)
        return (self.executable, "exec", "--skip-git-repo-check", prompt)

    async def run(self, command: Sequence[str], cwd: pathlib.Path, home: pathlib.Path) -> int:
        """Run `command` to its end (killed past the timeout); its exit code. Its output is
        read and dropped: it holds the conversation."""
        process = await asyncio.create_subprocess_exec(
            *command,
            cwd=cwd,
            env=entry.harness_environment(self.env(home)),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            async with asyncio.timeout(self.timeout_s):
                return await process.wait()
        except (TimeoutError, asyncio.CancelledError):
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise


def _path(executable: str) -> str:
    """The CLI's folder, then `node`'s (an npm-installed CLI is a node script), then the usual
    system folders."""
    folders = [str(pathlib.Path(executable).parent)]
    node = shutil.which("node")
    if node is not None:
        folders.append(str(pathlib.Path(node).parent))
    folders += ["/usr/local/bin", "/usr/bin", "/bin"]
    return os.pathsep.join(dict.fromkeys(folders))


def _launch(
    cli: _Cli,
    scope: launching.Scope,
    directive: directives.Directive,
    restores_from: int,
) -> launching.LaunchRecord:
    return launching.LaunchRecord(
        scope=scope,
        directive=directive,
        projects=(launching.Project("app", ""),),
        worker_image="qualify",
        harness=cli.adapter.name,
        restores_from_generation=restores_from,
        restore_grant="",
        capture_grant="",
        command=cli.print_command(ORIGINAL_TASK),
        checkpoint_remote=False,
        store_addr=None,
    )


async def _turn(cli: _Cli, step: str, command: Sequence[str], pod: _Pod) -> None:
    try:
        code = await cli.run(command, pod.worktree, pod.home)
    except TimeoutError:
        raise _Failed(step, f"the CLI did not finish within {cli.timeout_s:g} s") from None
    if code != 0:
        raise _Failed(step, f"the CLI exited {code}")


async def _session(cli: _Cli, pod: _Pod) -> list[tuple[str, str]]:
    """The fenced attempt's two turns; the conversation as the model last received it, with
    the mock's reply."""
    cli.provide(pod.home)
    await _turn(cli, "session", cli.print_command(FIRST_PROMPT), pod)
    session_id = cli.adapter.native_session_id(pod.home, pod.worktree)
    if session_id is None:
        raise _Failed("session", "the CLI wrote no session where the restorer looks for it")
    try:
        second = cli.adapter.resume_command(cli.print_command(ORIGINAL_TASK), session_id, "x")
    except base.HarnessError as error:
        raise _Failed("session", str(error)) from None
    await _turn(cli, "session", [*second[:-1], SECOND_PROMPT], pod)
    calls = cli.api.conversation_calls_since(0)
    if not calls:
        raise _Failed("session", "the CLI sent the model no conversation")
    history = [*model_mock.turns(calls[-1]), ("assistant", cli.api.reply)]
    if ("user", FIRST_PROMPT) not in history or ("user", SECOND_PROMPT) not in history:
        raise _Failed("session", "the second turn did not carry the first one")
    return history


async def _capture(
    cli: _Cli, pod: _Pod, root: pathlib.Path, harness_env: Mapping[str, str]
) -> captures.Captured:
    storage = settings.load_storage({"AGENTIHOOKS_CHECKPOINT_ROOT": str(root / "checkpoints")})
    attempt = restores.Attempt(pod.worktree, pod.home.parent, pod.home, harness_env)
    capturer = capturing.Capturer(_launch(cli, _FENCED, directives.FRESH, 0), attempt, storage)
    try:
        captured = await capturer.capture()
    except captures.CaptureError as error:
        raise _Failed("capture", f"the capture failed: {error}") from None
    if captured.continuity != "native" or not captured.native_session_id:
        raise _Failed("capture", "the checkpoint holds no native session")
    return captured


async def _restore(
    cli: _Cli,
    pod: _Pod,
    root: pathlib.Path,
    harness_env: Mapping[str, str],
    captured: captures.Captured,
) -> restores.Ready:
    directive = directives.Directive(
        captured.checkpoint_id,
        directives.Continuity.NATIVE,
        captured.native_session_id,
        captured.watermark,
    )
    launch = _launch(cli, _REPLACEMENT, directive, _FENCED.execution_generation)
    storage = settings.load_storage({"AGENTIHOOKS_CHECKPOINT_ROOT": str(root / "checkpoints")})
    attempt = restores.Attempt(pod.worktree, pod.home.parent, pod.home, harness_env)
    last: restores.Event | None = None
    async with fetching.granted_store(launch, storage, "") as store:
        async for event in restoring.restore(launch, attempt, store):
            last = event
    if isinstance(last, restores.Refused):
        raise _Failed("restore", f"the restore was refused: {last.reason}")
    if not isinstance(last, restores.Ready) or last.recovery is not directives.Continuity.NATIVE:
        raise _Failed("restore", "the restore did not end ready to resume natively")
    return last


def _compare(sent: list[tuple[str, str]], history: list[tuple[str, str]]) -> None:
    if sent[: len(history)] != history:
        raise _Failed(
            "history", "the resumed request does not start with every earlier turn unchanged"
        )
    if ("user", base.DEFAULT_CONTINUATION_PROMPT) not in sent[len(history) :]:
        raise _Failed("history", "the resumed request does not carry the continuation prompt")


async def qualify(
    harness_name: str,
    executable: str,
    *,
    workdir: pathlib.Path,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> qualification.Verdict:
    """Run the native-resume qualification of `executable`, the CLI of `harness_name`, in
    `workdir` (an empty folder, kept as it is left).

    Raises:
        ValueError: no harness has that name.
    """
    adapter = harness.for_name(harness_name, {})
    try:
        version = await adapter.read_version(executable)
    except base.HarnessError as error:
        return qualification.Verdict(
            adapter.name, "", False, "version", str(error).removeprefix("harness: ")
        )
    # This run names the version under test as qualified, as the operator's setting will.
    harness_env = {qualified_versions.VARIABLE: f"{adapter.name}={qualification.numeric(version)}"}
    fenced, replacement = _Pod.made(workdir / "fenced"), _Pod.made(workdir / "replacement")
    with model_mock.ModelApi() as api:
        cli = _Cli(adapter, executable, api, timeout_s)
        try:
            history = await _session(cli, fenced)
            captured = await _capture(cli, fenced, workdir, harness_env)
            shutil.rmtree(fenced.home.parent)  # the lost Pod: nothing of A helps B
            ready = await _restore(cli, replacement, workdir, harness_env, captured)
            cli.provide(replacement.home)
            before = api.call_count()
            await _turn(cli, "resume", ready.command, replacement)
            resumed = api.conversation_calls_since(before)
            if not resumed:
                raise _Failed("resume", "the resumed CLI sent the model nothing")
            _compare(model_mock.turns(resumed[0]), history)
        except _Failed as failed:
            return qualification.Verdict(adapter.name, version, False, failed.step, failed.reason)
    return qualification.Verdict(adapter.name, version, True, by_default=adapter.qualifies(version))


# --- the subcommand ------------------------------------------------------------------------


def _seconds(text: str) -> float:
    """argparse type: a positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"not a positive number of seconds: {text!r}")
    return value


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `qualify` to `agentihooks-restorer`'s subcommands."""
    sub = commands.add_parser(
        "qualify",
        help="check that the agent CLI installed here resumes a restored session natively",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    sub.add_argument(
        "--harness", required=True, help="claude-code or codex (as the swarm's harness)"
    )
    sub.add_argument(
        "--cli", help="the CLI's executable (default: `claude` or `codex` found on PATH)"
    )
    sub.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULT_TIMEOUT_S,
        help=f"seconds one CLI turn may take (default {DEFAULT_TIMEOUT_S:g})",
    )
    sub.add_argument(
        "--workdir",
        help="an empty folder to run in, kept afterwards for inspection (default: a temporary"
        " folder, removed)",
    )
    sub.add_argument("--json", action="store_true", help="print the verdict as one JSON object")


def run(args: argparse.Namespace) -> int:
    """Run `agentihooks-restorer qualify`; the exit code."""
    name = qualified_versions.harness_named(args.harness)
    if name is None:
        print(
            f"agentihooks-restorer qualify: unknown harness {args.harness!r}"
            " (claude-code or codex)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    adapter = harness.for_name(name, {})
    executable = shutil.which(args.cli or adapter.executable)
    if executable is None:
        print(
            f"agentihooks-restorer qualify: no {args.cli or adapter.executable} executable"
            " found (give --cli PATH)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    # The restorer's own lines (captures, restore steps) are not the verdict: warnings only.
    logs.configure("restorer", level=logging.WARNING)
    executable = os.path.abspath(executable)
    with contextlib.ExitStack() as stack:
        if args.workdir:
            workdir = pathlib.Path(args.workdir).resolve()
            workdir.mkdir(parents=True, exist_ok=True)
            if any(workdir.iterdir()):
                print("agentihooks-restorer qualify: --workdir is not empty", file=sys.stderr)
                return EXIT_USAGE
        else:
            workdir = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory()))
        verdict = asyncio.run(qualify(name, executable, workdir=workdir, timeout_s=args.timeout))
    print(json.dumps(verdict.as_json()) if args.json else verdict.line(), flush=True)
    return EXIT_QUALIFIED if verdict.qualified else EXIT_NOT_QUALIFIED
