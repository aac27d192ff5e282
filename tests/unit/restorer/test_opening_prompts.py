"""How a reconstructed opening prompt reaches the harness: an argument, or standard input.

Spec: the transcript is "passed to the harness as its opening prompt after the line Continue
from this recorded conversation. Native resume was unavailable." Linux refuses one process
argument over 128 KiB, and a real conversation is often longer: a prompt one argument can carry
stays the command's last argument, a longer one goes on standard input, in the form of the
command the harness reads its prompt from there (`claude -p`, `codex exec -`).
"""

from __future__ import annotations

import pytest

from services.restorer.harness import base, claude_code, codex

LIMIT = base.MAX_ARGUMENT_BYTES


def test_an_argument_fits_while_its_bytes_and_nul_fit_the_limit() -> None:
    """MAX_ARG_STRLEN counts bytes, the terminating NUL included, not characters."""
    assert base.fits_argument("x" * (LIMIT - 1))
    assert not base.fits_argument("x" * LIMIT)
    assert not base.fits_argument("é" * (LIMIT // 2))  # two bytes each


@pytest.mark.parametrize(
    ("original", "stdin_command"),
    [
        (
            ["claude", "-p", "--model", "opus", "fix the failing test"],
            ["claude", "-p", "--model", "opus"],
        ),
        (
            ["/opt/claude", "--print", "--output-format", "json", "--input-format", "text", "t"],
            ["/opt/claude", "--print", "--output-format", "json", "--input-format", "text"],
        ),
        (
            ["claude", "--add-dir", "/a", "/b", "-p", "--", "task"],
            ["claude", "--add-dir", "/a", "/b", "-p"],
        ),
    ],
)
def test_claude_code_in_print_mode_reads_its_prompt_from_stdin(
    original: list[str], stdin_command: list[str]
) -> None:
    """`claude -p` with no prompt argument reads the prompt from standard input: the original
    command's options, its own prompt dropped (the continuation began with it)."""
    assert claude_code.ClaudeCode().stdin_prompt_command(original) == stdin_command


@pytest.mark.parametrize(
    "original",
    [
        ["claude", "--model", "opus", "fix the failing test"],
        ["claude", "-p", "--input-format", "stream-json"],
        ["claude", "-p", "--input-format=stream-json", "task"],
    ],
    ids=["interactive", "stream-json", "stream-json-attached"],
)
def test_claude_code_without_a_text_prompt_on_stdin_is_refused(original: list[str]) -> None:
    """An interactive session keeps its terminal on stdin, and stream-json input is not a
    prompt: neither can take the continuation there."""
    with pytest.raises(base.HarnessError):
        claude_code.ClaudeCode().stdin_prompt_command(original)


def test_codex_exec_reads_its_prompt_from_stdin() -> None:
    """`codex exec -` reads the prompt from standard input; options on both sides of `exec`
    stay where they were."""
    command = codex.Codex().stdin_prompt_command(
        ["codex", "-m", "o3", "exec", "--json", "fix the failing test"]
    )
    assert command == ["codex", "-m", "o3", "exec", "--json", "-"]


@pytest.mark.parametrize("original", [["codex", "-m", "o3", "task"], ["codex", "login"]])
def test_codex_without_exec_is_refused(original: list[str]) -> None:
    """The interactive `codex [PROMPT]` takes its prompt only as an argument."""
    with pytest.raises(base.HarnessError):
        codex.Codex().stdin_prompt_command(original)


@pytest.mark.parametrize(
    ("harness_", "original"),
    [
        (claude_code.ClaudeCode(), ["claude", "-p", "--model", "opus", "task"]),
        (codex.Codex(), ["codex", "exec", "--json", "task"]),
    ],
    ids=["claude_code", "codex"],
)
def test_the_prompt_stays_an_argument_while_one_can_carry_it(
    harness_: base.Harness, original: list[str]
) -> None:
    """Short prompts keep today's shape: the original command with the prompt last."""
    prompt = "Continue from this recorded conversation.\n" + "x" * (LIMIT - 100)
    opening = base.opening(harness_, original, prompt)
    assert not opening.on_stdin
    assert opening.command == tuple(harness_.opening_prompt_command(original, prompt))
    assert opening.command[-1] == prompt


@pytest.mark.parametrize(
    ("harness_", "original", "stdin_command"),
    [
        (
            claude_code.ClaudeCode(),
            ["claude", "-p", "--model", "opus", "task"],
            ("claude", "-p", "--model", "opus"),
        ),
        (codex.Codex(), ["codex", "exec", "--json", "task"], ("codex", "exec", "--json", "-")),
    ],
    ids=["claude_code", "codex"],
)
def test_a_longer_prompt_goes_on_stdin(
    harness_: base.Harness, original: list[str], stdin_command: tuple[str, ...]
) -> None:
    """A prompt one argument cannot carry is not in the command at all: it comes on stdin."""
    prompt = "Continue from this recorded conversation.\n" + "x" * LIMIT
    opening = base.opening(harness_, original, prompt)
    assert opening.on_stdin
    assert opening.command == stdin_command
    assert all(base.fits_argument(word) for word in opening.command)


def test_a_longer_prompt_for_an_interactive_command_is_refused() -> None:
    """No argument can carry it and an interactive session reads no prompt from stdin."""
    with pytest.raises(base.HarnessError):
        base.opening(claude_code.ClaudeCode(), ["claude", "task"], "x" * LIMIT)
