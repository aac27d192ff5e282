"""Harness versions, qualification, the registry and the commands the supervisor runs."""

from __future__ import annotations

import pytest

from services.restorer import harness
from services.restorer.harness import base, claude_code, codex, versions

SID = "0b0c5e2a-7d1f-4c39-9a55-1f2e3d4c5b6a"
PROMPT = "Carry on from where the conversation ends."


@pytest.mark.parametrize(
    ("output", "version"),
    [
        ("2.1.3 (Claude Code)", "2.1.3"),
        ("2.10.0 (Claude Code)\n", "2.10.0"),
        ("codex-cli 0.162.0", "0.162.0"),
        ("codex-cli 0.162.1-alpha.2\n", "0.162.1-alpha.2"),
        ("v2.1.0", "2.1.0"),
    ],
)
def test_version_output_is_parsed(output: str, version: str) -> None:
    """`claude --version` prints `2.1.3 (Claude Code)`; `codex --version` `codex-cli 0.162.0`."""
    assert versions.parse_version(output) == version


@pytest.mark.parametrize("output", ["", "Claude Code", "codex-cli", "version 2"])
def test_output_without_a_version_is_refused(output: str) -> None:
    """No dotted version token: the version cannot be read."""
    with pytest.raises(base.HarnessError):
        versions.parse_version(output)


@pytest.mark.parametrize(
    ("version", "qualified"),
    [
        ("2.1", True),
        ("2.1.0", True),
        ("2.1.3", True),
        ("2.1.99", True),
        ("2.1.3-beta.1", True),
        ("2.10.0", False),
        ("2.11.3", False),
        ("2.2.0", False),
        ("2.0.9", False),
        ("21.1.0", False),
        ("3.1.0", False),
        ("2", False),
        ("", False),
        ("garbage", False),
    ],
)
def test_claude_code_qualification(version: str, qualified: bool) -> None:
    """Spec: native resume is qualified for Claude Code 2.1 (components, not string prefixes)."""
    assert claude_code.ClaudeCode({}).qualifies(version) is qualified


@pytest.mark.parametrize(
    ("version", "qualified"),
    [
        ("0.162.0", True),
        ("0.162.7", True),
        ("0.162", True),
        ("0.16.2", False),
        ("0.1620.0", False),
        ("0.163.0", False),
        ("0.161.9", False),
        ("1.162.0", False),
    ],
)
def test_codex_qualification(version: str, qualified: bool) -> None:
    """Spec: native resume is qualified for Codex 0.162."""
    assert codex.Codex({}).qualifies(version) is qualified


def test_registry_names_both_harnesses_and_refuses_others() -> None:
    """Records name the harness `claude_code` or `codex`; anything else is unknown."""
    assert harness.for_name("claude_code").name == "claude_code"
    assert harness.for_name("claude_code").qualified == "2.1"
    assert harness.for_name("codex").name == "codex"
    assert harness.for_name("codex").qualified == "0.162"
    with pytest.raises(ValueError):
        harness.for_name("gemini")


@pytest.mark.parametrize(
    ("original", "resume"),
    [
        (["claude"], ["claude", "--resume", SID, "--", PROMPT]),
        (
            ["/usr/local/bin/claude", "--dangerously-skip-permissions", "--model", "opus", "task"],
            [
                "/usr/local/bin/claude",
                "--resume",
                SID,
                "--dangerously-skip-permissions",
                "--model",
                "opus",
                "--",
                PROMPT,
            ],
        ),
        (
            ["claude", "--add-dir", "/a", "/b", "--permission-mode=acceptEdits", "do it"],
            [
                "claude",
                "--resume",
                SID,
                "--add-dir",
                "/a",
                "/b",
                "--permission-mode=acceptEdits",
                "--",
                PROMPT,
            ],
        ),
        (
            # Value-taking options of the real 2.1 CLIs: their values are never the prompt,
            # and `--plugin-dir` takes one value each time it is given.
            [
                "claude",
                "-p",
                "--effort",
                "high",
                "-n",
                "eng-2",
                "--debug-file",
                "/tmp/d.log",
                "--remote-control-session-name-prefix",
                "pod",
                "--plugin-dir",
                "/p1",
                "--plugin-dir",
                "/p2",
                "the original task",
            ],
            [
                "claude",
                "--resume",
                SID,
                "-p",
                "--effort",
                "high",
                "-n",
                "eng-2",
                "--debug-file",
                "/tmp/d.log",
                "--remote-control-session-name-prefix",
                "pod",
                "--plugin-dir",
                "/p1",
                "--plugin-dir",
                "/p2",
                "--",
                PROMPT,
            ],
        ),
        (
            ["claude", "--continue", "--session-id", "old", "-r", "older", "--fork-session", "-p"],
            ["claude", "--resume", SID, "-p", "--", PROMPT],
        ),
        (
            ["claude", "--verbose", "--", "--looks-like-a-flag"],
            ["claude", "--resume", SID, "--verbose", "--", PROMPT],
        ),
    ],
)
def test_claude_code_resume_command(original: list[str], resume: list[str]) -> None:
    """Resume: the original executable with `--resume ID`, its options kept, its prompt
    replaced by the continuation prompt after `--` (the real CLI refuses a headless resume
    without one)."""
    assert claude_code.ClaudeCode({}).resume_command(original, SID, PROMPT) == resume


def test_claude_code_opening_prompt_is_the_last_argument() -> None:
    """Reconstructed: the original command with the continuation as the final argument; `--`
    keeps a variadic option such as `--add-dir` from taking it as one more value."""
    original = ["claude", "--model", "opus", "original task", "--add-dir", "/a"]
    command = claude_code.ClaudeCode({}).opening_prompt_command(original, "Continue from…")
    assert command == ["claude", "--model", "opus", "--add-dir", "/a", "--", "Continue from…"]


@pytest.mark.parametrize(
    ("original", "resume"),
    [
        (["codex"], ["codex", "resume", SID, "--", PROMPT]),
        (
            ["/opt/bin/codex", "--model", "gpt-5", "-c", "k=v", "--full-auto", "fix it"],
            [
                "/opt/bin/codex",
                "resume",
                SID,
                "--model",
                "gpt-5",
                "-c",
                "k=v",
                "--full-auto",
                "--",
                PROMPT,
            ],
        ),
        (
            ["codex", "-c", "a=b", "exec", "--json", "--skip-git-repo-check", "do the task"],
            [
                "codex",
                "-c",
                "a=b",
                "exec",
                "--json",
                "--skip-git-repo-check",
                "resume",
                SID,
                "--",
                PROMPT,
            ],
        ),
    ],
)
def test_codex_resume_command(original: list[str], resume: list[str]) -> None:
    """Resume: `codex resume ID` (or `codex exec … resume ID`) keeping the executable path."""
    assert codex.Codex({}).resume_command(original, SID, PROMPT) == resume


def test_codex_opening_prompt_is_the_last_argument() -> None:
    """Reconstructed: the original command (interactive or exec) with the continuation last."""
    harness_ = codex.Codex({})
    assert harness_.opening_prompt_command(["codex", "-m", "o3", "task"], "Go") == [
        "codex",
        "-m",
        "o3",
        "--",
        "Go",
    ]
    assert harness_.opening_prompt_command(["codex", "exec", "--json", "task"], "Go") == [
        "codex",
        "exec",
        "--json",
        "--",
        "Go",
    ]


def test_codex_resume_keeps_value_taking_options_of_the_real_cli() -> None:
    """`--remote`, `--remote-auth-token-env`, `--thread-source` and `--cyber-access-program`
    take a value, which is never taken for the prompt."""
    original = [
        "codex",
        "--remote",
        "ws://127.0.0.1:9",
        "--remote-auth-token-env",
        "TOKEN_VAR",
        "exec",
        "--thread-source",
        "user",
        "--cyber-access-program",
        "standard",
        "the original task",
    ]
    assert codex.Codex({}).resume_command(original, SID, PROMPT) == [
        "codex",
        "--remote",
        "ws://127.0.0.1:9",
        "--remote-auth-token-env",
        "TOKEN_VAR",
        "exec",
        "--thread-source",
        "user",
        "--cyber-access-program",
        "standard",
        "resume",
        SID,
        "--",
        PROMPT,
    ]


@pytest.mark.parametrize("prompt", ["", "x" * (128 * 1024)])
def test_a_continuation_prompt_no_argument_can_carry_is_refused(prompt: str) -> None:
    """An empty prompt would resume without one; one over an argument's limit cannot run."""
    for harness_ in (claude_code.ClaudeCode({}), codex.Codex({})):
        with pytest.raises(base.HarnessError):
            harness_.resume_command([harness_.executable], SID, prompt)


def test_codex_other_subcommands_are_refused() -> None:
    """A command running `codex login` (or another subcommand) has no conversation to resume."""
    with pytest.raises(base.HarnessError):
        codex.Codex({}).resume_command(["codex", "login"], SID, PROMPT)


@pytest.mark.parametrize("bad", ["../x", "a/b", ".hidden", "..", "", "-rf", "x" * 200, "a b"])
def test_session_ids_that_are_not_plain_are_refused(bad: str) -> None:
    """A session id becomes a file name and an argument: only the schema's identifier form."""
    for harness_ in (claude_code.ClaudeCode({}), codex.Codex({})):
        with pytest.raises(base.HarnessError):
            harness_.resume_command([harness_.executable], bad, PROMPT)


def test_an_empty_original_command_is_refused() -> None:
    """There is no executable to resume with."""
    with pytest.raises(base.HarnessError):
        claude_code.ClaudeCode({}).resume_command([], SID, PROMPT)
