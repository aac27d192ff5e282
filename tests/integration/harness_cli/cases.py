"""What a qualified harness CLI must do, checked against the real published CLI.

Each function is one case; `test_claude_code_cli.py` and `test_codex_cli.py` run them against
the pinned CLIs (and `make qualify` against other versions).
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess

from services.common import directives
from services.restorer import captures, transcripts
from services.restorer.harness import base, claude_code, commands
from tests.integration.harness_cli import cli_support as cs

C = directives.Continuity


async def native_resume(cli: cs.Cli, tmp: pathlib.Path, *, config_dirs: bool) -> None:
    """Capture a real two-turn session in home and folder A, restore it natively into a fresh
    home and folder B (and, with `config_dirs`, a config folder set by the CLI's own variable
    at another path on each side), then run the exact command the worker entry runs: it exits
    0, and the model receives every earlier turn byte for byte, then the continuation prompt."""
    seat = cs.make_seat(tmp, config_dirs=config_dirs)
    history = cs.earlier_turns(cs.start_session(cli, seat))
    command = cli.print_command("the original task")
    captured = await cs.capture(cli, seat, command)
    assert captured.continuity == "native" and captured.native_session_id
    cli.provide(seat.home, seat.config)
    ready = await cs.restore(cli, seat, command, directives_native(captured))
    assert ready.recovery is C.NATIVE and ready.cwd == str(seat.worktree)
    before = len(cli.api.calls)
    done = cli.run(ready.command, seat.worktree, cli.env(seat.home, seat.config))
    assert done.returncode == 0, done.stderr[-2000:]
    resumed = cs.conversation_calls_since(cli.api, before)
    assert resumed, "the resumed CLI sent the mock nothing"
    cs.assert_history_sent(resumed[0], history, base.DEFAULT_CONTINUATION_PROMPT)


async def operator_prompt(cli: cs.Cli, tmp: pathlib.Path) -> None:
    """The swarm's own continuation prompt is the one the resumed conversation continues with."""
    seat = cs.make_seat(tmp, config_dirs=False)
    history = cs.earlier_turns(cs.start_session(cli, seat))
    command = cli.print_command("the original task")
    captured = await cs.capture(cli, seat, command)
    cli.provide(seat.home, seat.config)
    prompt = "-Resume the migration; run the tests first."  # a leading dash is still a prompt
    ready = await cs.restore(
        cli, seat, command, directives_native(captured), continuation_prompt=prompt
    )
    before = len(cli.api.calls)
    done = cli.run(ready.command, seat.worktree, cli.env(seat.home, seat.config))
    assert done.returncode == 0, done.stderr[-2000:]
    cs.assert_history_sent(cs.conversation_calls_since(cli.api, before)[0], history, prompt)


async def prompt_less_resume_fails(cli: cs.Cli, tmp: pathlib.Path) -> None:
    """Regression: the resume command the restorer used to build (no prompt) fails on the real
    CLI in headless mode, exactly as the issue saw it; the same restore now succeeds."""
    seat = cs.make_seat(tmp, config_dirs=False)
    cs.start_session(cli, seat)
    command = cli.print_command("the original task")
    captured = await cs.capture(cli, seat, command)
    cli.provide(seat.home, seat.config)
    ready = await cs.restore(cli, seat, command, directives_native(captured))
    old = list(ready.command[:-2])  # the same command without `-- PROMPT`
    assert ready.command[-2] == "--" and old[1:] != list(ready.command[1:])
    failed = cli.run(old, seat.worktree, cli.env(seat.home, seat.config))
    assert failed.returncode != 0
    if cli.harness == claude_code.NAME:
        assert "Provide a prompt to continue the conversation" in failed.stderr
    else:
        assert "No prompt provided via stdin" in failed.stderr
    done = cli.run(ready.command, seat.worktree, cli.env(seat.home, seat.config))
    assert done.returncode == 0, done.stderr[-2000:]


async def interactive_resume(cli: cs.Cli, tmp: pathlib.Path) -> None:
    """Interactive resume under tmux after `prepare_home`: no trust screen, no working-folder
    picker; the model receives the history, then the continuation prompt."""
    seat = cs.make_seat(tmp, config_dirs=False)
    history = cs.earlier_turns(cs.start_session(cli, seat))
    command = cli.interactive_command("the original task")
    captured = await cs.capture(cli, seat, command)
    cli.provide(seat.home, seat.config)
    ready = await cs.restore(cli, seat, command, directives_native(captured))
    before = len(cli.api.calls)
    screen = cs.run_in_tmux(
        cli,
        ready.command,
        seat.worktree,
        cli.env(seat.home, seat.config),
        until=lambda: bool(cs.conversation_calls_since(cli.api, before)),
    )
    lowered = screen.lower()
    for word in ("trust", "working directory", "do you want to", "yes, proceed"):
        assert word not in lowered, f"the CLI stopped at a question: {screen[-1500:]}"
    resumed = cs.conversation_calls_since(cli.api, before)
    cs.assert_history_sent(resumed[0], history, base.DEFAULT_CONTINUATION_PROMPT)


async def reconstructed(cli: cs.Cli, tmp: pathlib.Path) -> None:
    """A reconstructed continuation through the real CLI: its first request holds the archived
    transcript after the line `Continue from this recorded conversation. Native resume was
    unavailable.`"""
    seat = cs.make_seat(tmp, config_dirs=False)
    cs.start_session(cli, seat)
    command = cli.print_command("the original task")
    captured = await cs.capture(cli, seat, command)
    cli.provide(seat.home, seat.config)
    directive = directives.Directive(
        captured.checkpoint_id, C.RECONSTRUCTED, None, captured.watermark
    )
    ready = await cs.restore(cli, seat, command, directive)
    archived = (seat.attempt_dir / transcripts.CONTINUATION_FILE).read_text(encoding="utf-8")
    assert archived.startswith(transcripts.OPENING_LINE)
    before = len(cli.api.calls)
    done = cli.run(
        ready.command, seat.worktree, cli.env(seat.home, seat.config), stdin_path=ready.stdin_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    first = cs.conversation_calls_since(cli.api, before)[0]
    users = [text for role, text in cs.turns(first) if role == "user"]
    assert archived in users, "the opening prompt is not the archived transcript"
    # The archive holds the session's records as the CLI wrote them (JSON lines), the first
    # prompt with its raw separators and CRLF among them.
    assert json.dumps(cs.FIRST_PROMPT, ensure_ascii=False)[1:-1] in archived


def help_options(cli: cs.Cli, table: commands.FlagTable, *subcommands: list[str]) -> None:
    """Every value-taking option of the real CLI's `--help` (and of each named subcommand's)
    is in the adapter's option table with the same arity, so no value is taken for a prompt."""
    missing: list[str] = []
    for words in ([], *subcommands):
        done = subprocess.run(
            [cli.executable, *words, "--help"],
            env=cli.env(pathlib.Path("/nonexistent"), None),
            capture_output=True,
            text=True,
            timeout=cs.RUN_TIMEOUT_S,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        options = parse_help(done.stdout)
        assert len(options) > 10, "the help output was not understood"
        for names, arity in options:
            for name in names:
                kind = _kind(table, name)
                if kind != arity:
                    missing.append(f"{' '.join(words)} {name}: help says {arity}, table {kind}")
    assert not missing, "\n".join(missing)


_OPTION = re.compile(
    r"^\s{1,8}((?:-[A-Za-z0-9], )?--[A-Za-z0-9][A-Za-z0-9-]*(?:, --[A-Za-z0-9][A-Za-z0-9-]*)?)"
    r"(?:[ =](<[^>]+>(?:\.\.\.)?|\[[^\]]+\]))?"
)


def parse_help(text: str) -> list[tuple[list[str], str]]:
    """(names, arity) of each option line: `value`, `variadic`, `optional` or `flag`.

    Commander (Claude Code): `<x>` one value, `<x...>` values up to the next option, `[x]` an
    optional value. clap (Codex): `<X>` one value, `<X>...` several.
    """
    found: list[tuple[list[str], str]] = []
    for line in text.splitlines():
        match = _OPTION.match(line)
        if not match:
            continue
        names = [part.strip() for part in match.group(1).split(",")]
        value = match.group(2) or ""
        if not value:
            arity = "flag"
        elif value.startswith("["):
            arity = "optional"
        elif value.endswith("...") or value.endswith("...>"):
            arity = "variadic"
        else:
            arity = "value"
        found.append((names, arity))
    return found


def _kind(table: commands.FlagTable, name: str) -> str:
    if name in table.takes_value:
        return "value"
    if name in table.variadic:
        return "variadic"
    if name in table.optional_value:
        return "optional"
    return "flag"


def directives_native(captured: captures.Captured) -> directives.Directive:
    return directives.Directive(
        captured.checkpoint_id, C.NATIVE, captured.native_session_id, captured.watermark
    )
